"""What explains a run: failure reports, crash reports and symbolization, the run observers."""
