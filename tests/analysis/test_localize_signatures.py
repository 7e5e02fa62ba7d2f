"""localize's error signatures and error bound on synthetic outputs: what each signature names,
and that a correct computation in the program's dtypes stays within its bound."""

import torch

from tilescope.analysis.localize.bound import Bounded, rounding, ulp
from tilescope.analysis.localize.metrics import close
from tilescope.analysis.localize.signatures import Writer, output_signatures
from tilescope.analysis.localize.tolerance import round_up, tightest_tolerance


def grid_writers(name="y", n=4, b=8):
    """n x n tasks, task i * n + j writing block (i, j) of b x b."""
    out = []
    for i in range(n):
        for j in range(n):
            box = ((i * b, i * b + b), (j * b, j * b + b))
            out.append(Writer(i * n + j, "k", 1, box, f"{name}[{box[0][0]}:{box[0][1]}, {box[1][0]}:{box[1][1]}]"))
    return out


def sigs(sim, golden, ws):
    mism = ~close(sim, golden, 1e-5, 1e-6)
    return {s.kind: s for s in output_signatures("y", sim, golden, mism, ws, 1e-5, 1e-6)}


def test_a_block_no_task_wrote_is_named_with_its_box():
    golden = torch.randn(32, 32)
    sim = golden.clone()
    sim[8:16, 0:32] = 0.0
    ws = [w for w in grid_writers() if w.box[0] != (8, 16)]  # no task writes rows 8..16
    found = sigs(sim, golden, ws)
    assert found["unwritten"].text.startswith("256 mismatching elements of y were written by no task (within y[8:16, 0:32])")
    assert "writers" not in found


def test_a_transposed_output_and_a_transposed_block():
    golden = torch.randn(32, 32)
    found = sigs(golden.T.contiguous(), golden, grid_writers())
    assert found["transposed"].text.startswith("y equals its golden transposed")
    sim = golden.clone()
    sim[8:16, 16:24] = golden[8:16, 16:24].T
    found = sigs(sim, golden, grid_writers())
    assert found["transposed"].text == "task 6 wrote y[8:16, 16:24] transposed" and found["transposed"].task == 6


def test_rows_off_by_a_factor_each_are_scaled():
    golden = torch.rand(32, 32) + 0.5
    factors = torch.linspace(0.5, 2.0, 32)[:, None]
    found = sigs(golden * factors, golden, grid_writers())
    text = found["scaled"].text
    assert text.startswith("each mismatching row of y is its golden times a factor of its own (row 0: x0.5")
    assert "per-row quantity" in text


def test_a_block_holding_another_position_of_the_golden_is_misplaced():
    golden = torch.randn(32, 32)
    sim = golden.clone()
    sim[0:8, 8:16] = golden[24:32, 0:8]  # task 1 wrote block (3, 0)'s values
    found = sigs(sim, golden, grid_writers())
    m = found["misplaced"]
    assert m.task == 1 and "task 1 (y[0:8, 8:16]) wrote the golden's y[24:32, 0:8]" in m.text
    assert found["writers"].detail["tasks"] == [1]


def test_the_bound_holds_for_float32_sums_in_any_order_and_ulp_is_the_spacing():
    x = torch.randn(16, 4096, dtype=torch.float64)
    exact = x.sum(dim=-1)
    gamma = 4096 * 2.0**-24 / (1 - 4096 * 2.0**-24)
    bound = gamma * x.abs().sum(dim=-1)
    xf = x.float()
    forward, backward = xf[:, 0].clone(), xf[:, -1].clone()
    for j in range(1, 4096):  # one f32 add at a time, from either end
        forward, backward = forward + xf[:, j], backward + xf[:, -1 - j]
    for got in (xf.sum(dim=-1), forward, backward):
        assert bool(((got.double() - exact).abs() <= bound).all())
        assert bool(((got.double() - exact).abs() > 0).any())  # the sums did round
    assert float(ulp("f32", torch.tensor([1.0]))[0]) == 2.0**-23
    assert float(ulp("bf16", torch.tensor([3.0]))[0]) == 2.0**-6
    assert float(rounding("bf16", torch.tensor([1.0]))[0]) == 2.0**-8 + 2.0**-134
    b = Bounded.exact(torch.tensor([1.5], dtype=torch.bfloat16))
    assert b.v.dtype == torch.float64 and float(b.e[0]) == 0.0


def test_the_tightest_tolerance_passes_and_is_rounded_up():
    golden = torch.tensor([1.0, 2.0, 0.0, -4.0])
    sim = torch.tensor([1.0 + 3e-6, 2.0, 1e-7, -4.0])
    rtol, atol = tightest_tolerance({"y": sim}, {"y": golden}, 0.0)
    assert (rtol, atol) == (round_up(float(sim[0]) - 1.0), float(torch.tensor(1e-7)))
    assert bool(torch.isclose(sim, golden, rtol=rtol, atol=atol).all())
    assert round_up(3.21e-6) == 3.3e-6 and round_up(0.0) == 0.0
