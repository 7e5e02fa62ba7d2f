"""The test harness: specs, ``run_jit``, comparison reports and the shared CLI flags."""

from tilescope.analysis.compare import CompareReport
from tilescope.harness.flags import add_harness_args, harness_kwargs
from tilescope.harness.run_jit import RunResult, run_jit
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
