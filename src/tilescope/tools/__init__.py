"""Read-only viewers of what a run wrote: ``tilescope dump``, ``deps``, ``trace``, ``builds``."""
