"""The IR: typed nodes, types, the one traversal, type rules, analyses, the printer, the verifier."""
