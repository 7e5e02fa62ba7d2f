"""Files that make a build re-runnable on its own: ``debug/run.py`` and ``scene_test.py``.

Both are written once, when the build is compiled; a later refresh never rewrites them (a
person is expected to edit ``scene_test.py``).
"""

from __future__ import annotations

from typing import Any

RUN_PY = '''"""Re-run this build ({program}) on its saved data, from any working directory.

    python {rel}debug/run.py                      # replay data/ (saved with --save-data) on sim
    python {rel}debug/run.py -p interp --log-level v0
    python {rel}debug/run.py --golden-data OTHER_DATA_DIR

Hand edits to kernels/**/*.cpp, orchestration/*.cpp or ir/{program}.py are rebuilt first
(only the edited files). Every run flag of `tilescope replay` is accepted.
"""

import sys
from pathlib import Path

from tilescope.harness.replay import main

BUILD_DIR = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    sys.exit(main([str(BUILD_DIR), *sys.argv[1:]]))
'''

SCENE_TEST = '''"""Test cases of this build ({program}), run by `pytest <this build dir>`.

The saved data (data/, written by --save-data) is always one case. To add cases, list them in
CASES and write generate_args and compute_golden: the only code a person has to write. Each
case may set "rtol" and "atol" (default 1e-5). Run one case with `pytest <dir> -k <name>`, on
the interpreter with `--platform interp`.
"""

import torch  # noqa: F401 - used by the cases you write

# The program's arguments, in order:
{arg_lines}
CASES = [
    # {{"name": "seed1", "seed": 1, "rtol": 1e-5, "atol": 1e-5}},
]


def generate_args(case: dict) -> dict:
    """Every argument of one case: name -> tensor (or a number, for scalars)."""
    # TODO: build the inputs of `case`, for example:
    #   g = torch.Generator().manual_seed(case["seed"])
    #   return {{
{example_lines}
    #   }}
    raise NotImplementedError("TODO: write generate_args in scene_test.py")


def compute_golden(args: dict) -> None:
    """Fill the outputs ({outputs}) of `args` in place with the expected values."""
    # TODO: for example: args["{first_out}"][:] = ...
    raise NotImplementedError("TODO: write compute_golden in scene_test.py")
'''


def _example(a: dict[str, Any]) -> str:
    if a["shape"] is None:
        return "0" if a["dtype"] in ("i32", "i8", "u8", "i64") else "1.0"
    shape = ", ".join(map(str, a["shape"]))
    dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64"}.get(a["dtype"])
    if a["direction"] == "out":
        return f"torch.zeros({shape}, dtype=torch.{dtype or a['dtype']})"
    if dtype:
        return f"torch.randn({shape}, generator=g).to(torch.{dtype})"
    return f"torch.randint(-8, 8, ({shape},), generator=g).to(torch.{_TORCH_INT.get(a['dtype'], a['dtype'])})"


_TORCH_INT = {"i32": "int32", "i8": "int8", "u8": "uint8", "i64": "int64", "bool": "bool"}


def run_py(data: dict[str, Any]) -> str:
    """The build's ``debug/run.py``: it runs the build on its saved data."""
    return RUN_PY.format(program=data["PROGRAM"], rel="")


def scene_test(data: dict[str, Any]) -> str:
    """The build's ``scene_test.py``: the build as a pytest case, its inputs and golden to write."""
    args = data["ARGS"]
    describe = lambda a: (  # noqa: E731
        f"scalar {a['dtype']}" if a["shape"] is None
        else f"{'weight' if a.get('weight') else a['direction']} tensor {a['shape']} {a['dtype']}"
    )
    outputs = [a["name"] for a in args if a["direction"] in ("out", "inout")]
    return SCENE_TEST.format(
        program=data["PROGRAM"],
        arg_lines="\n".join(f"#   {a['name']}: {describe(a)}" for a in args),
        example_lines="\n".join(f'    #       "{a["name"]}": {_example(a)},' for a in args),
        outputs=", ".join(outputs) or "none",
        first_out=outputs[0] if outputs else "out",
    )
