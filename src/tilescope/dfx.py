"""Run-time debug outputs of a sim run, written to ``<build>/dfx_outputs/``.

Invariants: each output is written only when its option is on (``enable_dep_gen``:
``deps.json`` + ``deps_graph.html``; ``enable_trace``: ``trace.json``; ``enable_dump_tensor``:
``tensor_dump/tensor_dump.json`` + ``tensor_dump.bin``), after the run — also
after a failed run, from what was recorded up to the failure. Files are replaced atomically,
so a reader never sees half a file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilescope.errors import TilescopeError

if TYPE_CHECKING:
    from tilescope.program import CompiledProgram
    from tilescope.runtime.core import RunReport

log = logging.getLogger("tilescope")

DFX_DIR = "dfx_outputs"


def _writers(opts: dict[str, Any]) -> list[tuple[str, Any]]:
    writers = []
    if opts["enable_dep_gen"]:
        from tilescope.tools.deps import write_deps

        writers.append(("dependency graph", write_deps))
    if opts["enable_trace"]:
        from tilescope.tools.trace import write_trace

        writers.append(("trace", write_trace))
    if opts["enable_dump_tensor"]:
        from tilescope.tools.dump_writer import write_tensor_dump

        writers.append(("tensor dump", write_tensor_dump))
    return writers


def write_dfx(
    program: CompiledProgram, report: RunReport, opts: dict[str, Any], *, run_failed: bool = False
) -> list[Path]:
    """Write the outputs ``opts`` asks for from ``report``; returns their paths.

    Each output is written even if another one fails. After a failed run (``run_failed``) a
    writing error is only logged, so it never hides the run's own error; otherwise it raises.
    """
    out = program.work_dir / DFX_DIR
    out.mkdir(exist_ok=True)
    paths: list[Path] = []
    problems: list[str] = []
    for what, write in _writers(opts):
        try:
            paths += write(out, program, report)
        except Exception as e:  # noqa: BLE001 - one broken output must not lose the others
            problems.append(f"cannot write the {what} to {out}: {type(e).__name__}: {e}")
    for p in paths:
        log.info("[dfx] wrote %s", p)
    for problem in problems:
        log.error("[dfx] %s", problem)
    if problems and not run_failed:
        raise TilescopeError("; ".join(problems))
    return paths
