"""The golden's own NaN, and an Inf its arithmetic made, where the run's output differs: named as
the golden's (its output, its first element, the step of golden_fn that made it), never a kernel's;
an Inf a mask places is still the kernel's to compute."""

import inspect

import torch

from tilescope.analysis.golden_holes import golden_hole
from tilescope.analysis.golden_trace import record_golden


def _line(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def naive_softmax(t):
    e = t["x"].exp()
    t["y"][:] = e / e.sum(dim=-1, keepdim=True)


def overflowing_scale(t):
    t["y"][:] = t["x"].exp() * 0.5


def causal_mask(t):
    t["y"][:] = torch.where(t["x"] > 0, t["x"], float("-inf"))


def golden_of(fn, x):
    """What the harness saves: the golden's outputs, the inputs, and the trace of golden_fn."""
    values = {"x": x.clone(), "y": torch.zeros_like(x)}
    trace = record_golden(fn, {k: v.clone() for k, v in values.items()})
    fn(values)
    return {"y": values["y"]}, {"x": x, "y": torch.zeros_like(x)}, trace


def test_a_nan_golden_fn_made_where_the_kernel_is_right_names_its_line_and_the_overflow():
    x = torch.randn(4, 8)
    x[1, 3] = 100.0  # exp overflows f32: inf / inf in the golden; a stable kernel gives ~1
    golden, inputs, trace = golden_of(naive_softmax, x)
    right = {"y": torch.softmax(x, dim=-1)}
    hole = golden_hole(golden, right, inputs, 1e-5, 1e-5, trace)
    assert (hole.output, hole.kind, hole.count, hole.first) == ("y", "NaN", 1, [1, 3])
    line = _line(naive_softmax, "e / e.sum")
    assert hole.made.op == "div" and hole.made.line.endswith(f":{line}")
    summary = hole.summary()
    assert summary.startswith("the golden of y holds NaN at 1 element where the run's output differs (the first at [1, 3]): "
                              "golden_fn made it, 'div' at ")  # fmt: skip
    assert f":{line} (`t[\"y\"][:] = e / e.sum(dim=-1, keepdim=True)`)" in summary and "fix golden_fn" in summary
    evidence = " ".join(hole.evidence())
    assert "no kernel is blamed" in evidence and "'exp' at " in evidence and "an overflow" in evidence


def test_a_nan_the_input_holds_is_named_as_the_input_s():
    x = torch.randn(4, 8)
    x[2, 0] = float("nan")
    golden, inputs, trace = golden_of(overflowing_scale, x)
    hole = golden_hole(golden, {"y": torch.zeros(4, 8)}, inputs, 1e-5, 1e-5, trace)
    assert hole.first == [2, 0] and "the input x holds NaN" in hole.summary() and "fix the inputs" in hole.summary()
    untraced = golden_hole(golden, {"y": torch.zeros(4, 8)}, inputs, 1e-5, 1e-5, None, "no trace was saved")
    assert "made from the input x, which holds NaN" in untraced.summary()


def test_a_nan_with_no_trace_is_still_the_golden_s():
    x = torch.randn(4, 8)
    golden, inputs, _ = golden_of(naive_softmax, x)
    golden["y"][0, 0] = float("nan")
    hole = golden_hole(golden, {"y": torch.softmax(x, dim=-1)}, inputs, 1e-5, 1e-5, None, "data/ holds no trace")
    assert hole.summary().endswith("golden_fn made it from inputs that hold none: the golden is no reference there; "
                                   "fix golden_fn and save the data again")  # fmt: skip
    assert "data/ holds no trace" in hole.evidence()


def test_an_inf_golden_fn_computed_where_the_output_is_finite_is_the_golden_s():
    x = torch.randn(4, 8)
    x[3, 5] = 200.0
    golden, inputs, trace = golden_of(overflowing_scale, x)
    finite = {"y": torch.where(x > 100, torch.finfo(torch.float32).max, x.exp() * 0.5)}
    hole = golden_hole(golden, finite, inputs, 1e-5, 1e-5, trace)
    assert (hole.kind, hole.first, hole.made.op) == ("Inf", [3, 5], "exp")
    assert "computed (op 'exp'), not placed by a mask" in hole.evidence()[0]


def test_an_inf_a_mask_places_is_the_kernel_s_to_compute():
    x = torch.randn(4, 8)
    golden, inputs, trace = golden_of(causal_mask, x)
    forgot_the_mask = {"y": x.clone()}  # finite where the golden holds -inf: the kernel's bug
    assert golden_hole(golden, forgot_the_mask, inputs, 1e-5, 1e-5, trace) is None
    assert golden_hole(golden, forgot_the_mask, inputs, 1e-5, 1e-5, None) is None
    assert golden_hole(golden, {"y": golden["y"].clone()}, inputs, 1e-5, 1e-5, trace) is None
