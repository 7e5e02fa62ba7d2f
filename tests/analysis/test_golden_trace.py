"""The golden's own steps: golden_fn recorded under a dispatch mode (ops, lines, the values they
came from), composites kept whole and decomposed, views naming their value, the budget, and the
file saved with the data."""

import inspect

import torch
import torch.nn.functional as F

from tilescope.analysis.golden_trace import GoldenTrace, load_trace, record_golden, save_trace
from tilescope.build.paths import GOLDEN_TRACE


def softmax_golden(t):
    x = t["x"]
    m = x.amax(dim=-1, keepdim=True)
    shifted = x - m
    e = shifted.exp()
    t["y"][:] = e / e.sum(dim=-1, keepdim=True)


def _line(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _values():
    return {"x": torch.randn(4, 8), "y": torch.zeros(4, 8)}


def test_every_step_is_kept_with_its_op_line_and_sources():
    t = _values()
    trace = record_golden(softmax_golden, t)
    by_op = {v.op: v for v in trace.values}
    assert [v.op for v in trace.values] == ["input", "input", "amax", "sub", "exp", "sum", "div"]
    assert by_op["sub"].line.endswith(f":{_line(softmax_golden, 'shifted = x - m')}")
    assert by_op["sub"].text == "shifted = x - m"
    assert by_op["sub"].inputs == (0, by_op["amax"].index)  # x and m
    x = t["x"]
    assert torch.equal(by_op["sub"].value, x - x.amax(dim=-1, keepdim=True))
    assert by_op["sub"].where().startswith("'sub' at ") and trace.values[0].where() == "input 'x'"


def test_views_name_their_value_and_the_harness_code_around_is_not_recorded():
    def golden(t):
        h = t["x"].reshape(8, 4).t()  # views: no value of their own
        t["y"][:] = (h * 2.0).t().reshape(4, 8)

    trace = record_golden(golden, _values())
    ops = [v for v in trace.values if v.op != "input"]
    assert [v.op for v in ops] == ["mul"] and ops[0].inputs == (0,)


def test_composites_are_kept_whole_and_decomposed():
    def golden(t):
        t["y"][:] = F.layer_norm(t["x"], (8,))
        t["z"][:] = F.conv2d(t["g"], t["w"], padding=1)

    t = {**_values(), "g": torch.randn(1, 2, 5, 5), "w": torch.randn(3, 2, 3, 3), "z": torch.zeros(1, 3, 5, 5)}
    trace = record_golden(golden, t)
    ops = [v.op for v in trace.values]
    assert {"sub", "rsqrt", "mul"} <= set(ops)  # layer norm's primitives
    cols = next(v for v in trace.values if v.value is not None and tuple(v.value.shape) == (1, 18, 25))
    assert torch.allclose(cols.value, F.unfold(t["g"], (3, 3), padding=1))  # conv as unfold (im2col) ...
    assert "bmm" in ops or "mm" in ops  # ... and a matmul


def test_values_past_the_budget_are_listed_without_their_tensor():
    trace = record_golden(softmax_golden, _values(), budget=3 * 4 * 8 * 4)  # three [4, 8] f32 values
    kept = [v for v in trace.values if v.op != "input" and v.value is not None]
    assert trace.dropped >= 1 and len(kept) + trace.dropped == len(trace.values) - 2
    assert all(v.line for v in trace.values if v.op != "input")


def test_saved_with_the_data_and_read_back_with_the_inputs_values(tmp_path):
    t = _values()
    before = {k: v.clone() for k, v in t.items()}
    trace = record_golden(softmax_golden, t)
    save_trace(tmp_path, trace)
    back, why = load_trace(tmp_path, before)
    assert why is None and [v.op for v in back.values] == [v.op for v in trace.values]
    assert torch.equal(back.values[0].value, before["x"])  # an input's value comes from the data's in/
    assert all(torch.equal(a.value, b.value) for a, b in zip(back.values[2:], trace.values[2:]))
    raw = torch.load(tmp_path / GOLDEN_TRACE, weights_only=True)
    assert raw["values"][0]["value"].numel() == 0  # inputs are not written twice


def test_a_missing_or_corrupt_trace_is_a_reason_not_an_error(tmp_path):
    none, why = load_trace(tmp_path, {})
    assert none is None and "holds no trace of the golden" in why and "--save-data" in why
    (tmp_path / GOLDEN_TRACE).parent.mkdir(parents=True)
    (tmp_path / GOLDEN_TRACE).write_bytes(b"not a trace")
    none, why = load_trace(tmp_path, {})
    assert none is None and "cannot be read" in why
    torch.save({"format": 99}, tmp_path / GOLDEN_TRACE)
    assert load_trace(tmp_path, {})[0] is None
    assert isinstance(GoldenTrace(), GoldenTrace)
