"""tilescope: write tile kernels in Python, compile them to C++, run them as a task graph on a
simulated many-core accelerator, and debug every failure down to a task, an op and a line.
"""

from tilescope._version import __version__
from tilescope.errors import (
    ArgumentError,
    ConfigError,
    DSLError,
    HarnessError,
    RuntimeFailure,
    TilescopeError,
    ToolchainError,
    UnsupportedSyntaxError,
    VerifyError,
)
from tilescope.ir.dtypes import bf16, bool_, f16, f32, f64, i8, i32, i64, u8
from tilescope.ir.types import Direction as ArgDirection
from tilescope.language.annotations import InOut, Out, Scalar, Tensor, Weight
from tilescope.language.decorators import inline, kernel
from tilescope.language.ops import STUBS as _STUBS
from tilescope.launch.jit import jit
from tilescope.launch.program import CompiledProgram

# every DSL op of the registry, as ts.<name>
globals().update(_STUBS)

__all__ = [
    "__version__",
    "ArgDirection",
    "CompiledProgram",
    "ArgumentError",
    "ConfigError",
    "DSLError",
    "HarnessError",
    "InOut",
    "Out",
    "RuntimeFailure",
    "Scalar",
    "Tensor",
    "TilescopeError",
    "ToolchainError",
    "UnsupportedSyntaxError",
    "VerifyError",
    "Weight",
    "bf16",
    "bool_",
    "f16",
    "f32",
    "f64",
    "i32",
    "i64",
    "i8",
    "inline",
    "jit",
    "kernel",
    "u8",
    *sorted(_STUBS),
]


def __getattr__(name: str):
    # NOTE: the harness (and torch behind it) is imported on first use only.
    if name == "replay_compiled":
        from tilescope.harness.replay import replay_compiled

        return replay_compiled
    if name == "localize":
        from tilescope.analysis.localize.localize_command import localize

        return localize
    if name == "triage":
        from tilescope.analysis.triage.triage_command import triage

        return triage
    message = f"module 'tilescope' has no attribute {name!r}"
    if not name.startswith("__"):
        from tilescope.language.ops import close_matches, op_names

        matches = close_matches(name, [*__all__, "CompiledProgram", "replay_compiled", "localize", "triage"])
        if matches:
            message += f"; did you mean {' or '.join('ts.' + m for m in matches)}?"
        message += f" (the DSL ops: {', '.join('ts.' + n for n in op_names())}; see docs/dsl.md)"
    raise AttributeError(message)
