"""The pass manager: the one place every pass runs.

Invariants: a pass is a named, pure ``Program -> Program`` function. The manager verifies the
IR after the front-end and after every pass (so a broken pass is caught at the pass that broke
it), times each pass, and with ``dump_dir`` writes ``NN_after_<Pass>.py`` — valid DSL source of
the IR at that point.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tilescope.errors import VerifyError
from tilescope.ir.nodes import Program
from tilescope.ir.printer import program_str
from tilescope.ir.verifier import verify_program


@dataclass(frozen=True)
class Pass:
    """A named pass: its pure ``Program -> Program`` function and a one-line description."""

    name: str
    fn: Callable[[Program], Program]
    doc: str


@dataclass
class PassReport:
    """What running the passes produced: each pass's wall time (seconds) and the IR dumps written."""

    timings: list[tuple[str, float]] = field(default_factory=list)
    dumps: list[Path] = field(default_factory=list)


class PassManager:
    """Runs a pipeline of passes, verifying, timing and (with ``dump_dir``) dumping the IR around each."""

    def __init__(
        self,
        passes: Sequence[Pass],
        *,
        verify: bool = True,
        local_memory_bytes: int = 256 * 1024,
        dump_dir: Path | None = None,
    ):
        self.passes = list(passes)
        self.verify = verify
        self.local_memory_bytes = local_memory_bytes
        self.dump_dir = dump_dir

    def _checkpoint(self, index: int, name: str, program: Program, report: PassReport) -> None:
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            path = self.dump_dir / f"{index:02d}_after_{name}.py"
            header = f"tilescope IR of {program.name} after {name}; valid DSL source (edit and re-lower it)"
            path.write_text(program_str(program, header))
            report.dumps.append(path)
        if self.verify:
            try:
                verify_program(program, self.local_memory_bytes)
            except VerifyError as e:
                if name != "FrontEnd":
                    e.pass_name = name
                    e.args = (f"{e.args[0]}\n  (IR verification failed after pass {name})",)
                raise

    def run(self, program: Program) -> tuple[Program, PassReport]:
        """``program`` after every pass, and the report.

        The front-end's IR is verified (when ``verify``) and dumped (``00_after_FrontEnd.py``)
        before the first pass; a VerifyError after a pass names that pass.
        """
        report = PassReport()
        self._checkpoint(0, "FrontEnd", program, report)
        for i, p in enumerate(self.passes, start=1):
            t0 = time.perf_counter()
            program = p.fn(program)
            report.timings.append((p.name, time.perf_counter() - t0))
            self._checkpoint(i, p.name, program, report)
        return program, report
