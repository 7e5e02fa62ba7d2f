"""2-D max and average pooling of NCHW f32 tensors, as torch.nn.functional.max_pool2d (kernel,
stride, padding, dilation) and avg_pool2d (kernel, stride, padding; count_include_pad=True,
torch's default: the padding counts in the divisor, which is kh * kw).

Each task pools a block of channels of one image, a block of output rows at a time. For each
kernel tap (i, j) one padded, strided load reads the [rows, OW] tile whose element [r, o] is
x[n, c, (oh + r)*sh - ph + i*dh, o*sw - pw + j*dw]: -inf in the padding for max (so it never
wins), 0 for average (so it adds nothing).

Configurations (--config): max3s2 (3x3 max, stride 2, padding 1), max2 (2x2 max, stride 2),
avg3s2 (3x3 average, stride 2, padding 1), avg3 (3x3 average, stride 1, padding 1).

    python models/pool2d.py -p sim --config max3s2      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

CONFIGS = {
    "max3s2": dict(mode="max", n=2, c=16, h=33, w=30, k=3, stride=2, padding=1),
    "max2": dict(mode="max", n=2, c=16, h=32, w=32, k=2, stride=2),
    "avg3s2": dict(mode="avg", n=2, c=16, h=33, w=30, k=3, stride=2, padding=1),
    "avg3": dict(mode="avg", n=2, c=8, h=24, w=24, k=3, stride=1, padding=1),
}


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def out_size(size: int, k: int, stride: int, padding: int, dilation: int = 1) -> int:
    """torch's output length of a pool along one dim (ceil_mode=False)."""
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _block(total: int, target: int) -> int:
    """The largest divisor of ``total`` not above ``target``."""
    return max(b for b in range(1, min(total, target) + 1) if total % b == 0)


def build(
    mode: str = "max",
    n: int = 2,
    c: int = 16,
    h: int = 32,
    w: int = 32,
    k=3,
    stride=None,
    padding=0,
    dilation=1,
    block_channels: int = 8,
    block_rows: int = 32,
):
    """The pooling program (``mode`` "max" or "avg") for x [n, c, h, w] and y [n, c, oh, ow];
    ``k``, ``stride`` (default: ``k``, as torch's), ``padding`` and ``dilation`` (max only) are an
    int or an (h, w) pair. A task pools up to ``block_channels`` channels, up to ``block_rows``
    output rows at a time (each the largest count that divides c, and oh)."""
    if mode not in ("max", "avg"):
        raise ValueError(f"mode must be 'max' or 'avg', got {mode!r}")
    kh, kw = _pair(k)
    sh, sw = _pair(k if stride is None else stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if mode == "avg" and (dh, dw) != (1, 1):
        raise ValueError("avg_pool2d has no dilation")
    if 2 * ph > kh or 2 * pw > kw:
        raise ValueError(f"padding {padding} must be at most half the kernel {k} (torch's rule)")
    oh, ow = out_size(h, kh, sh, ph, dh), out_size(w, kw, sw, pw, dw)
    bc, bh = _block(c, block_channels), _block(oh, block_rows)
    pad = float("-inf") if mode == "max" else 0.0
    divisor = float(kh * kw)

    @ts.kernel
    def pool_channels(x: ts.Tensor[[bc, h, w], ts.f32], y: ts.Out[[bc, oh, ow], ts.f32]):
        for ch in ts.range(0, bc):
            for r in ts.range(0, oh, bh):
                acc = ts.full([bh, ow], pad, ts.f32)
                for i in ts.range(0, kh):
                    for j in ts.range(0, kw):
                        win = ts.load(
                            x,
                            [ch, r * sh - ph + i * dh, j * dw - pw],
                            [1, bh, ow],
                            dims=[1, 2],
                            strides=[1, sh, sw],
                            pad=pad,
                        )
                        if mode == "max":
                            acc = ts.maximum(acc, win)
                        else:
                            acc = acc + win
                if mode == "avg":
                    acc = acc / divisor
                ts.store(y, [ch, r, 0], acc, dims=[1, 2])

    @ts.jit
    def pool2d(x: ts.Tensor[[n, c, h, w], ts.f32], y: ts.Out[[n, c, oh, ow], ts.f32]):
        for b in ts.range(0, n):
            for c0 in ts.range(0, c, bc):
                pool_channels(x[b, c0 : c0 + bc, :, :], y[b, c0 : c0 + bc, :, :])

    return pool2d


def golden_for(mode: str = "max", k=3, stride=None, padding=0, dilation=1):
    """The golden of a build() with these arguments: torch's max_pool2d or avg_pool2d."""

    def golden(t: dict) -> None:
        if mode == "max":
            t["y"][:] = torch.nn.functional.max_pool2d(t["x"], k, stride, padding, dilation)
        else:
            t["y"][:] = torch.nn.functional.avg_pool2d(t["x"], k, stride, padding)

    return golden


def specs(
    n: int = 2, c: int = 16, h: int = 32, w: int = 32, k=3, stride=None, padding=0, dilation=1, **_
) -> list:
    (kh, kw), (sh, sw) = _pair(k), _pair(k if stride is None else stride)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    return [
        TensorSpec("x", [n, c, h, w], torch.float32, init_value=torch.randn),
        TensorSpec(
            "y",
            [n, c, out_size(h, kh, sh, ph, dh), out_size(w, kw, sw, pw, dw)],
            torch.float32,
            is_output=True,
        ),
    ]


def case(config: str):
    """(program, specs, golden) of a named configuration (CONFIGS)."""
    cfg = CONFIGS[config]
    pool = {key: cfg[key] for key in ("mode", "k", "stride", "padding", "dilation") if key in cfg}
    return build(**cfg), specs(**cfg), golden_for(**pool)


TOLERANCE = (1e-6, 1e-6)  # rtol, atol: max is exact; an average of 9 numbers rounds a few times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), default="max3s2", help="which pool (default: max3s2)"
    )
    add_harness_args(parser)
    args = parser.parse_args(argv)
    fn, spec, golden = case(args.config)
    rtol, atol = TOLERANCE
    result = run_jit(fn, spec, golden_fn=golden, rtol=rtol, atol=atol, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
