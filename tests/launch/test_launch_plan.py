"""A run's descriptors are made once per set of arguments (``launch_plan``): a program run in a loop
reuses them, and any change to what they describe (another tensor, a view, a resize, a scalar's
value, an overlap with an output) gets a plan of its own, so every run still writes where its
arguments say and checks the inputs it must."""

import pickle
import threading

import numpy as np
import pytest
import torch

import tilescope as ts
from tilescope.launch.launch_plan import MAX_PLANS, LaunchPlans, args_key

F = ts.f32


@ts.kernel
def scaled_rows(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], k: ts.Scalar[F]):
    t = ts.load(x, [0, 0], [4, 8])
    ts.store(y, [0, 0], t * k)


@ts.jit
def scaled(x: ts.Tensor[[16, 8], F], y: ts.Out[[16, 8], F], k: ts.Scalar[F]):
    for r in ts.range(0, 16, 4):
        scaled_rows(x[r : r + 4, :], y[r : r + 4, :], k)


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return scaled.compile(build_dir=str(tmp_path_factory.mktemp("scaled")))


def _plans(prog):
    return prog.binaries().plans


@pytest.fixture(autouse=True)
def _no_plans_yet(prog):
    prog.binaries().plans = LaunchPlans()  # each test counts the plans it makes itself


def test_a_loop_on_the_same_arguments_makes_one_plan(prog):
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    before = len(_plans(prog))
    for _ in range(5):
        y.zero_()
        prog.run(x, y, 2.0)
        torch.testing.assert_close(y, x * 2.0, rtol=0, atol=0)
    assert len(_plans(prog)) == before + 1


def test_each_change_to_what_the_descriptors_say_gets_its_own_plan(prog):
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    prog.run(x, y, 2.0)
    before = len(_plans(prog))
    # another output tensor: the run writes there, not into the last one
    other = torch.zeros(16, 8)
    prog.run(x, other, 2.0)
    torch.testing.assert_close(other, x * 2.0, rtol=0, atol=0)
    # a scalar's value
    prog.run(x, other, 3.0)
    torch.testing.assert_close(other, x * 3.0, rtol=0, atol=0)
    # the sign of a zero (0.0 == -0.0 in Python)
    prog.run(x, other, 0.0)
    assert not other.signbit().any() or x.signbit().any()
    prog.run(x, other, -0.0)
    torch.testing.assert_close(other, x * -0.0, rtol=0, atol=0)
    assert torch.equal(other.signbit(), (x * -0.0).signbit())
    # the same tensor object, its storage swapped under it (a new address)
    y.set_(torch.zeros(16, 8))
    prog.run(x, y, 4.0)
    torch.testing.assert_close(y, x * 4.0, rtol=0, atol=0)
    # a view into a larger storage (a storage offset)
    big = torch.zeros(20, 8)
    prog.run(x, big[4:], 5.0)
    torch.testing.assert_close(big[4:], x * 5.0, rtol=0, atol=0)
    assert big[:4].eq(0).all()
    assert len(_plans(prog)) == before + 6


def test_a_tensor_made_where_a_freed_one_was_is_written_as_itself(prog):
    x = torch.randn(16, 8)
    for i in range(20):  # the allocator hands the same address back: the plan describes it exactly
        y = torch.full((16, 8), float(i))
        prog.run(x, y, 2.0)
        torch.testing.assert_close(y, x * 2.0, rtol=0, atol=0)
        del y


def test_runs_from_two_threads_on_their_own_tensors_write_their_own_outputs(prog):
    errors = []

    def loop(seed):
        g = torch.Generator().manual_seed(seed)
        try:
            for _ in range(50):
                x, y = torch.randn(16, 8, generator=g), torch.zeros(16, 8)
                prog.run(x, y, 2.0)
                if not torch.equal(y, x * 2.0):
                    errors.append(seed)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_an_input_overlapping_an_output_is_checked_on_every_run_of_its_plan(prog):
    base = np.zeros((17, 8), dtype=np.float32)
    x, y = torch.from_numpy(base[:16]), torch.from_numpy(base[1:])  # y one row past x: the run writes x
    for _ in range(2):  # the second run reuses the plan, and still checks
        base[:16] = np.arange(128, dtype=np.float32).reshape(16, 8) + 1
        with pytest.raises(ts.RuntimeFailure, match=r"the run changed input 'x'"):
            prog.run(x, y, 2.0)


def test_new_tensors_of_the_same_layout_skip_the_argument_check(prog, monkeypatch):
    x = torch.randn(16, 8)
    prog.run(x, torch.zeros(16, 8), 2.0)
    checks, check = [], prog.check_args
    monkeypatch.setattr(prog, "check_args", lambda args: (checks.append(args), check(args)))
    for _ in range(3):
        prog.run(x, torch.zeros(16, 8), 2.0)  # a fresh output each time: a new plan, not a new check
    assert checks == []
    prog.run(x, torch.zeros(16, 8), 3.0)  # a scalar's value is checked (its range)
    with pytest.raises(ts.ArgumentError, match="dtype"):
        prog.run(x, torch.zeros(16, 8, dtype=torch.float64), 3.0)
    assert len(checks) == 2


def test_no_key_for_arguments_that_cannot_be_told_cheaply(prog):
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    assert args_key(prog.args, (x, y, 2.0)) is not None
    assert args_key(prog.args, (x.numpy(), y, 2.0)) is None  # a NumPy array
    assert args_key(prog.args, (x, y, torch.tensor(2.0))) is None  # a tensor where a scalar goes
    assert args_key(prog.args, (x, y, 2.0)) != args_key(prog.args, (x, y, 2))  # 2.0 and 2 are told apart
    assert args_key(prog.args, (x, y, 0.0)) != args_key(prog.args, (x, y, -0.0))
    nan = float("nan")
    assert args_key(prog.args, (x, y, nan)) == args_key(prog.args, (x, y, nan))  # one plan for a NaN
    with torch.no_grad():
        leaf = torch.randn(16, 8, requires_grad=True)
        no_grad = args_key(prog.args, (leaf, y, 2.0))
    assert args_key(prog.args, (leaf, y, 2.0)) != no_grad  # requires_grad counts only under grad mode


def test_plans_are_bounded_and_the_oldest_is_forgotten(prog):
    plans = LaunchPlans()
    x = torch.randn(16, 8)
    outputs = [torch.zeros(16, 8) for _ in range(MAX_PLANS + 3)]
    made = [
        plans.plan(prog.args, (x, y, 2.0), args_key(prog.args, (x, y, 2.0)), confined=True) for y in outputs
    ]
    assert len(plans) == MAX_PLANS
    # the newest is kept, the first was forgotten (asking again makes a new one)
    last = outputs[-1]
    assert plans.plan(prog.args, (x, last, 2.0), args_key(prog.args, (x, last, 2.0)), confined=True) is made[-1]
    first = outputs[0]
    assert plans.plan(prog.args, (x, first, 2.0), args_key(prog.args, (x, first, 2.0)), confined=True) is not made[0]


def test_buffer_records_read_lazily_are_the_records_and_pickle_as_a_list(prog):
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    report = prog.run(x, y, 2.0).report
    buffers = report.buffers
    assert [b.program_arg for b in buffers] == [0, 1]
    assert buffers[1].shape == (16, 8) and buffers[1].dtype == "f32"
    assert buffers == list(buffers)
    again = pickle.loads(pickle.dumps(report))
    assert isinstance(again.buffers, list) and again.buffers == list(buffers)


def test_buffer_records_read_after_later_runs_are_their_own_runs(prog):
    """A plain run's buffer records are copied out of its own core result on first read, however
    many runs came between."""
    x = torch.randn(16, 8)
    ys = [torch.zeros(16, 8) for _ in range(3)]
    reports = [prog.run(x, y, 2.0).report for y in ys]
    del ys[1:]  # the tensors of later runs may be gone: the records describe what each run was given
    first = reports[0].buffers
    assert [b.buffer_id for b in first] == [x.untyped_storage().data_ptr(), ys[0].untyped_storage().data_ptr()]
    assert len({r.buffers[1].buffer_id for r in reports}) == 3


def test_a_plain_runs_core_result_is_freed_when_its_buffer_records_are_first_read(prog, monkeypatch):
    from tilescope.runtime.library import load_core

    lib = load_core()
    real, freed = lib.ts_run_free, []

    def counted(handle):
        freed.append(handle)
        real(handle)

    monkeypatch.setattr(lib, "ts_run_free", counted)
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    report = prog.run(x, y, 2.0).report
    assert freed == []  # kept: the buffer records are read from it
    assert [b.buffer_id for b in report.buffers] == [x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()]
    assert len(freed) == 1  # freed once read
    assert report.buffers[1].shape == (16, 8) and len(freed) == 1
    prog.run(x, y, 2.0, enable_dep_gen=True)  # records edges: everything copied out at once
    assert len(freed) == 2
