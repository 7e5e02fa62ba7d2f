"""``tilescope triage``: the command and its first, in-process steps (``triage_command``), and the steps
that run the program again in a contained child (``steps``)."""
