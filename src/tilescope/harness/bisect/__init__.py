"""``tilescope bisect``: the first commit at which a kernel went wrong (``bisect_command``)."""
