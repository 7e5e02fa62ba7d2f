"""Naming the culprit of a wrong answer (``tilescope localize``; the run itself is driven from
``localize_command``, which hands the rest of this package a sim run's records).

- ``analyze``: the questions in order (pass, codegen, algorithm, precision) and the report;
  ``codegen_check`` and ``precision`` hold the codegen and precision questions;
- ``bound``: the float64 run with the error bound of the program's dtypes;
- ``tasks``: every task re-executed alone from sim's inputs; what the orchestration submitted;
- ``probe_build``: the culprit task replayed on a probe build, op by op;
- ``references``: intermediates and probes against golden_fn's references;
- ``signatures``: the shape of an output's error, mapped to tasks by their regions;
- ``tolerance``: the tolerance an innocent mismatch justifies;
- ``source_map``, ``op_naming``: IR statements to C++ and DSL lines, and how ops are named;
- ``html``: ``report.html`` (the report itself is ``analysis.report``); ``metrics``: the numbers quoted.
"""
