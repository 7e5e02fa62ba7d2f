"""models/dropout_softmax.py: its mask is ts.rand's, so no torch golden holds the output. What must
hold instead: sim and interp drop the same elements, bit for bit; every kept element is
softmax / (1 - p); the share dropped is p within 5 standard deviations of a binomial draw; the
seed decides the mask (another seed, another mask; the same seed, the same mask); and the mask
does not depend on how rows are split into tasks."""

import math

import pytest
import torch

import dropout_softmax

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

ROWS, COLS = 64, 256


@pytest.fixture(scope="module")
def programs():
    """The program compiled with 16 and with 8 rows per task."""
    return {block: dropout_softmax.build(ROWS, COLS, block=block).compile() for block in (16, 8)}


@pytest.fixture(scope="module")
def x():
    return 4 * torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(0))


def run(prog, x, seed, p, platform="sim"):
    y = torch.full_like(x, float("nan"))  # an element the kernel never stores stays NaN
    prog.run(x, y, seed, p, platform=platform)
    assert not y.isnan().any()
    return y


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_sim_and_interp_drop_the_same_elements_and_keep_softmax_scaled(programs, x, p):
    sim, interp = run(programs[16], x, 1234, p, "sim"), run(programs[16], x, 1234, p, "interp")
    assert torch.equal(sim == 0, interp == 0)
    kept_value = torch.softmax(x, dim=-1) / (1 - p)
    assert bool((kept_value > 0).all())  # so a 0 in the output is a dropped element
    for y in (sim, interp):
        kept = y != 0
        torch.testing.assert_close(y[kept], kept_value[kept], rtol=1e-5, atol=1e-6)
        ok, message = dropout_softmax.check_dropout(y, kept_value, p)
        assert ok, message


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_drop_rate_is_p_within_five_standard_deviations(programs, x, p):
    dropped = run(programs[16], x, 99, p) == 0
    n = dropped.numel()
    rate = dropped.sum().item() / n
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n), rate
    # every task draws its own numbers: the mask is not one block's repeated
    assert not torch.equal(dropped[0:16], dropped[16:32])
    assert not torch.equal(dropped[:, 0:128], dropped[:, 128:256])


def test_the_seed_decides_the_mask(programs, x):
    p = 0.3
    first, again, other = (run(programs[16], x, s, p) == 0 for s in (7, 7, 8))
    assert torch.equal(first, again)
    differ = (first != other).float().mean().item()  # two independent masks disagree at 2 p (1 - p)
    assert abs(differ - 2 * p * (1 - p)) < 0.05, differ


def test_the_mask_does_not_depend_on_the_rows_per_task(programs, x):
    by16, by8 = run(programs[16], x, 2024, 0.25), run(programs[8], x, 2024, 0.25)
    assert torch.equal(by16 == 0, by8 == 0)
    assert torch.equal(by16, by8)  # the same arithmetic per row: the same bits


def test_p_0_keeps_everything_and_p_1_drops_everything(programs, x):
    torch.testing.assert_close(run(programs[16], x, 5, 0.0), torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)
    assert bool((run(programs[16], x, 5, 1.0) == 0).all())


def test_the_model_runs_as_a_script(capsys):
    assert dropout_softmax.main(["-p", "interp"]) == 0
    out = capsys.readouterr().out
    assert "[COMPARE] y: PASS  0 kept elements differ from softmax / (1 - p); drop rate 0.0" in out
    assert "[PASS] dropout_softmax on interp" in out
