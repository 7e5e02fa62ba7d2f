"""The DSL surface: annotations, ops, ``@ts.kernel``/``@ts.inline``, and the AST front-end."""
