"""``tilescope sweep``: a grid of cases run by an engine, one report (``sweep_command``)."""
