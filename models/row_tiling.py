"""The row tiling of the row-wise models (rms_norm, softmax, layernorm): how many rows a task
takes and how many of them it reads at a time.

A task takes up to 512 KiB of f32 rows, but there are at least 16 tasks where there are rows for
them: few tasks, so that each one's fixed cost in the run (about a microsecond) is small against
its work, and enough of them to keep the workers busy. It takes its rows a step at a time, as
many as fit 16 KiB (the core's L1 with room to spare), so the passes over a step after the first
read it from L1, and the next step's rows stream in from memory.
"""


def fitting_rows(rows: int, cols: int, nbytes: int, most: int | None = None) -> int:
    """As many f32 rows of ``cols`` as fit ``nbytes`` (at least one, at most ``most``), halved
    until the count divides ``rows``."""
    n = max(1, min(rows, most or rows, nbytes // (4 * cols)))
    while rows % n:
        n //= 2
    return n


def task_rows(rows: int, cols: int) -> int:
    """The rows of one task (see the module's docstring)."""
    return fitting_rows(rows, cols, 512 * 1024, most=max(1, rows // 16))


def step_rows(block: int, cols: int) -> int:
    """The rows a task of ``block`` rows takes at a time (see the module's docstring)."""
    return fitting_rows(block, cols, 16 * 1024)


def row_tiling(rows: int, cols: int) -> dict:
    """build()'s ``block``, ``chunk`` and ``step`` for whole rows, each read once from memory."""
    block = task_rows(rows, cols)
    return {"block": block, "chunk": cols, "step": step_rows(block, cols)}
