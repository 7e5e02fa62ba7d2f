"""Routing a failure to its culprit (``tilescope triage``; the runs are driven from the harness).

- ``audit``: the access audit build of a kernel (its C++ as the build holds it, compiled with
  ``TS_AUDIT_ACCESSES``) and what each task actually loaded and stored, against what it declared;
- ``hazards``: the race proof over a run's graph: every two tasks whose accesses overlap with a
  write must be ordered by a path of edges.
"""
