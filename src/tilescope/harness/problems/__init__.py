"""``tilescope problems``: a suite of problems in KernelBench's format (a reference ``Model`` and a
solution ``ModelNew`` calling tilescope programs) run, checked and timed, and a wrong answer's data
saved for ``tilescope triage``. See docs/problems.md."""
