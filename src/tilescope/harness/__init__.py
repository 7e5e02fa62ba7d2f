"""The test harness: specs, ``run_jit``, comparison reports and the shared CLI flags."""

from tilescope.harness.cli import add_harness_args, harness_kwargs
from tilescope.harness.compare import CompareReport
from tilescope.harness.run import RunResult, run_jit
from tilescope.harness.specs import ScalarSpec, TensorSpec

__all__ = [
    "CompareReport",
    "RunResult",
    "ScalarSpec",
    "TensorSpec",
    "add_harness_args",
    "harness_kwargs",
    "run_jit",
]
