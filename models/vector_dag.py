"""A 5-task vector DAG through intermediate tensors:

a = x + y          (task 0)
b = x * y          (task 1)
c = silu(a)        (task 2, after 0)
d = max(b, c)      (task 3, after 1 and 2)
out = d * 0.5 + tanh(a)   (task 4, after 3 and 0)

python models/vector_dag.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

R, C = 64, 128
IN_T = ts.Tensor[[R, C], ts.f32]
OUT_T = ts.Out[[R, C], ts.f32]


@ts.inline
def tile_of(t):
    return ts.load(t, [0, 0], [R, C])


@ts.kernel
def add(a: IN_T, b: IN_T, out: OUT_T):
    ts.store(out, [0, 0], tile_of(a) + tile_of(b))


@ts.kernel
def mul(a: IN_T, b: IN_T, out: OUT_T):
    ts.store(out, [0, 0], tile_of(a) * tile_of(b))


@ts.kernel
def silu(a: IN_T, out: OUT_T):
    ts.store(out, [0, 0], ts.silu(tile_of(a)))


@ts.kernel
def maximum(a: IN_T, b: IN_T, out: OUT_T):
    ts.store(out, [0, 0], ts.maximum(tile_of(a), tile_of(b)))


@ts.kernel
def combine(d: IN_T, a: IN_T, out: OUT_T):
    ts.store(out, [0, 0], tile_of(d) * 0.5 + ts.tanh(tile_of(a)))


@ts.jit
def vector_dag(x: IN_T, y: IN_T, out: OUT_T):
    a = ts.create_tensor([R, C], ts.f32)
    b = ts.create_tensor([R, C], ts.f32)
    c = ts.create_tensor([R, C], ts.f32)
    d = ts.create_tensor([R, C], ts.f32)
    add(x, y, a)
    mul(x, y, b)
    silu(a, c)
    maximum(b, c, d)
    combine(d, a, out)


def golden(t: dict) -> None:
    a = t["x"] + t["y"]
    d = torch.maximum(t["x"] * t["y"], torch.nn.functional.silu(a))
    t["out"][:] = d * 0.5 + torch.tanh(a)


SPECS = [
    TensorSpec("x", [R, C], torch.float32, init_value=torch.randn),
    TensorSpec("y", [R, C], torch.float32, init_value=torch.randn),
    TensorSpec("out", [R, C], torch.float32, is_output=True),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(vector_dag, SPECS, golden_fn=golden, rtol=1e-5, atol=1e-6, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
