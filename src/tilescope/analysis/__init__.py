"""The root-cause analyses, each whole in one place — what runs the program and what reasons about
the runs together:

- ``localize/``: names the culprit of a wrong answer (``tilescope localize``; ``localize_command`` drives it);
- ``triage/``: classifies a failure and runs the analyses that answer its class (``tilescope triage``);
- ``audit`` (with ``hazards``, the race proof), ``poison``, ``shuffle``: the access audit, poisoned
  runs and shuffled schedules, each its run and its analysis;
- ``fix/``: candidate edits for a culprit, verified on copies (``triage --fix``);
- ``report``: the report every analysis writes; ``data`` the saved failing data they replay,
  ``compare`` the tolerances, ``recorded`` the instrumented run they share, ``progress`` their
  progress lines and argument types.
"""
