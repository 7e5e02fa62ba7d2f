"""A run that changes a tensor passed as an input (a kernel storing through a view of it) fails,
naming the input and the element, however the run was made: a direct run, isolated, on interp,
through the harness; and triage names the task and the store."""

import numpy as np
import pytest
import torch
import triage_programs as tp
from helpers import line_of

import tilescope as ts
from tilescope.ir.types import Direction
from tilescope.launch.inputs_kept import KeptInputs

F = ts.f32


@ts.kernel
def double_rows(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F]):
    t = ts.load(x, [0, 0], [4, 8])
    ts.store(y, [0, 0], t * 2.0)


@ts.jit
def doubled(x: ts.Tensor[[16, 8], F], y: ts.Out[[16, 8], F]):
    for r in ts.range(0, 16, 4):
        double_rows(x[r : r + 4, :], y[r : r + 4, :])


class _Spec:
    def __init__(self, name, direction):
        self.name, self.direction = name, direction


def test_kept_inputs_name_the_changed_input_and_element_bit_for_bit():
    x, y = torch.tensor([[1.0, float("nan")], [3.0, 4.0]]), torch.zeros(2, 2)
    specs = [_Spec("x", Direction.IN), _Spec("y", Direction.OUT), _Spec("n", Direction.SCALAR)]
    kept = KeptInputs(specs, (x, y, 3))
    y.fill_(7.0)  # an output may change
    kept.check("p", "BUILD")  # and a NaN that stays a NaN is unchanged
    x[1, 0] = -3.0
    with pytest.raises(ts.RuntimeFailure) as info:
        kept.check("p", "BUILD")
    msg = str(info.value)
    assert msg.startswith("p: the run changed input 'x', which is a ts.Tensor (read only): 1 of 4 element(s) differ")
    assert "the first at [1, 0] (3.0 -> -3.0)" in msg and "`tilescope triage BUILD` names the task" in msg
    a = np.zeros(3, dtype=np.int32)
    big = KeptInputs([_Spec("a", Direction.IN)], (a,), limit=4)  # past the limit: not kept
    a[0] = 1
    big.check("p", "BUILD")
    small = KeptInputs([_Spec("a", Direction.IN)], (a,))
    a[2] = 5
    with pytest.raises(ts.RuntimeFailure, match=r"input 'a'.*the first at \[2\] \(0 -> 5\)"):
        small.check("p", "BUILD")


@pytest.mark.parametrize("shape, view", [((3, 4), lambda t: t), ((3, 4), lambda t: t.t()), ((600, 512), lambda t: t)],
                         ids=["small", "transposed", "large"])  # fmt: skip
def test_inputs_kept_as_bytes_or_as_a_clone_are_compared_bit_for_bit(shape, view):
    # kept as bytes when small and contiguous; a strided view and a large input as a clone
    for dtype in (torch.float32, torch.bfloat16):
        base = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape).to(dtype)
        x = view(base)
        kept = KeptInputs([_Spec("x", Direction.IN)], (x,))
        kept.check("p", "BUILD")
        x[1, 2] = -1
        with pytest.raises(ts.RuntimeFailure, match=r"input 'x'.*1 of \d+ element\(s\) differ, the first at \[1, 2\]"):
            kept.check("p", "BUILD")


@pytest.fixture
def writes_its_input(tmp_path):
    prog = doubled.compile(build_dir=str(tmp_path))
    tp.edit_kernel(prog, "double_rows", "store(y, {0, 0}, fuse(t) * 2.0f", "TensorView<float> w = x; store(w, {0, 0}, fuse(t) * 2.0f")
    return ts.CompiledProgram.from_dir(prog.work_dir)


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [False, True])
def test_a_kernel_storing_into_an_input_fails_the_run(writes_its_input, isolate):
    x, y = torch.randn(16, 8), torch.zeros(16, 8)
    with pytest.raises(ts.RuntimeFailure) as info:
        writes_its_input.run(x, y, isolate=isolate)
    assert "the run changed input 'x', which is a ts.Tensor (read only)" in str(info.value)


@pytest.mark.slow
def test_triage_names_the_task_and_the_store_into_the_input(writes_its_input):
    from tilescope.analysis.data import save_snapshot
    from tilescope.analysis.triage.triage_command import triage

    x = torch.randn(16, 8)
    save_snapshot(writes_its_input.work_dir / "data", list(writes_its_input.args), {"x": x, "y": torch.zeros(16, 8)},
                  {"y": x * 2}, {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    rep = triage(writes_its_input.work_dir)
    assert rep.category == "out_of_bounds" and rep.culprit.kernel == "double_rows" and rep.culprit.op == "store"
    assert rep.culprit.dsl_line.endswith(f"test_inputs_kept.py:{line_of(double_rows, 'ts.store(y')}")
    assert any("the run changed input 'x'" in e for e in rep.evidence)
    assert any("(declared In, written)" in e for e in rep.evidence)


def test_an_input_that_is_also_an_output_is_the_run_s_to_write():
    t = torch.zeros(4, 4)
    specs = [_Spec("a", Direction.IN), _Spec("b", Direction.OUT)]
    kept = KeptInputs(specs, (t[:2], t[2:]))
    t.fill_(1.0)
    kept.check("p", "BUILD")


@pytest.mark.slow
def test_a_write_far_past_an_argument_faults_in_an_isolated_run_and_its_replay(tmp_path, capsys):
    from tilescope.analysis.data import save_snapshot
    from tilescope.cli import main as cli

    prog = doubled.compile(build_dir=str(tmp_path))
    tp.edit_kernel(prog, "double_rows", "store(y, {0, 0}, fuse(t) * 2.0f", "y.data[64 * 128] = 1.0f; store(y, {0, 0}, fuse(t) * 2.0f")
    prog = ts.CompiledProgram.from_dir(prog.work_dir)
    x = torch.randn(16, 8)
    with pytest.raises(ts.RuntimeFailure) as info:  # 32 KiB past y, 64 times its size: never near another tensor
        prog.run(x, torch.zeros(16, 8), isolate=True)
    assert "SIGSEGV" in str(info.value) and "double_rows" in str(info.value)
    save_snapshot(prog.work_dir / "data", list(prog.args), {"x": x, "y": torch.zeros(16, 8)}, {"y": x * 2},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    assert cli(["replay", str(prog.work_dir)]) != 0
    out, err = capsys.readouterr()
    assert "SIGSEGV" in out + err and "[PASS]" not in out + err


def test_two_runs_kept_at_once_on_one_thread_keep_their_own_copies():
    x, z = torch.arange(4096.0), torch.full((4096,), 7.0)
    first = KeptInputs([_Spec("x", Direction.IN)], (x,))
    second = KeptInputs([_Spec("z", Direction.IN)], (z,))  # made while the first still holds its copy
    assert first.buf is not second.buf
    first.check("p", "BUILD")
    second.check("p", "BUILD")
    x[5] = -1.0
    with pytest.raises(ts.RuntimeFailure, match=r"input 'x'.*1 of 4096 element\(s\) differ, the first at \[5\] \(5.0 -> -1.0\)"):
        first.check("p", "BUILD")
    second.check("p", "BUILD")
    # a finished run's bytes serve the thread's next run: no fresh pages per run
    held = second.buf
    del second
    third = KeptInputs([_Spec("z", Direction.IN)], (z,))
    assert third.buf is held
    third.check("p", "BUILD")


def test_a_confined_run_keeps_only_the_inputs_whose_bytes_a_written_tensor_reaches():
    base = np.zeros((8, 4), dtype=np.float32)
    apart, x = torch.randn(8, 4), torch.from_numpy(base[:4])  # x and y: two storages over one array
    y = torch.from_numpy(base[3:])
    specs = [_Spec("apart", Direction.IN), _Spec("x", Direction.IN), _Spec("y", Direction.OUT)]
    confined = KeptInputs(specs, (apart, x, y), confined=True)
    assert [name for name, _, _ in confined.kept] == ["x"]
    assert [name for name, _, _ in KeptInputs(specs, (apart, x, y)).kept] == ["apart", "x"]
    y[0, 1] = 5.0  # row 3 of the array: x's last row
    with pytest.raises(ts.RuntimeFailure, match=r"input 'x'.*1 of 16 element\(s\) differ, the first at \[3, 1\]"):
        confined.check("p", "BUILD")
    # a strided output reaching past its last row's start still overlaps
    strided = torch.from_numpy(base[4:].T)
    assert [n for n, _, _ in KeptInputs(specs, (apart, x, strided), confined=True).kept] == []
    assert [n for n, _, _ in KeptInputs(specs, (apart, x, torch.from_numpy(base[2:].T)), confined=True).kept] == ["x"]
    # a column of the array spans every row, gaps and all; an output whose last element is the
    # input's first overlaps it; one ending just before it does not
    later = torch.from_numpy(base[6:])
    assert [n for n, _, _ in KeptInputs(specs, (apart, later, torch.from_numpy(base[:, :1])), confined=True).kept] == ["x"]
    flat = base.reshape(-1)
    for end, kept in ((17, ["x"]), (16, [])):
        out = torch.from_numpy(flat[:end])
        assert [n for n, _, _ in KeptInputs(specs, (apart, torch.from_numpy(base[4:]), out), confined=True).kept] == kept


def _loaded(prog):
    from tilescope.launch.run import load_binaries

    return load_binaries(prog)


@pytest.mark.slow
def test_only_a_checked_verified_build_of_generated_code_is_confined(tmp_path):
    import shutil

    prog = doubled.compile(build_dir=str(tmp_path / "checked"))
    assert _loaded(prog).stores_confined
    unchecked = doubled.compile(build_dir=str(tmp_path / "unchecked"), check_bounds=False)
    assert not _loaded(unchecked).stores_confined
    assert not _loaded(doubled.compile(build_dir=str(tmp_path / "unverified"), verify=False)).stores_confined
    # a binary that is not the one recorded (copied over from the unchecked build, not rebuilt)
    replaced = doubled.compile(build_dir=str(tmp_path / "replaced"))
    binary = replaced.kernels[0]["binary"]
    shutil.copyfile(unchecked.work_dir / binary, replaced.work_dir / binary)
    assert not _loaded(replaced).stores_confined
    # a build whose state cannot be read
    (replaced.work_dir / "build_state.json").unlink()
    assert not _loaded(replaced).stores_confined
    source = prog.work_dir / prog.kernels[0]["source"]
    generated = source.read_text()
    assert "fuse(t) * 2.0f" in generated
    source.write_text(generated.replace("fuse(t) * 2.0f", "fuse(t) * 3.0f"))
    edited = ts.CompiledProgram.from_dir(prog.work_dir)
    edited.ensure_binaries()
    assert not _loaded(edited).stores_confined
    source.write_text(generated)  # back to the text codegen wrote
    again = ts.CompiledProgram.from_dir(prog.work_dir)
    again.ensure_binaries()
    assert _loaded(again).stores_confined


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [False, True])
def test_a_checked_run_still_fails_when_an_output_shares_bytes_with_an_input(tmp_path, isolate):
    prog = doubled.compile(build_dir=str(tmp_path))
    base = np.arange(136, dtype=np.float32).reshape(17, 8)
    x, y = torch.from_numpy(base[:16]), torch.from_numpy(base[1:])  # two storages, y one row past x
    # only the task of y's rows 0..3 writes x's row 1: twice x's row 0
    with pytest.raises(ts.RuntimeFailure, match=r"the run changed input 'x'.*the first at \[1, 0\] \(8.0 -> 0.0\)"):
        prog.run(x, y, isolate=isolate)


@ts.kernel
def shifted_rows(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], n: ts.Scalar[ts.i32]):
    t = ts.load(x, [0, 0], [4, 8])
    ts.store(y, [n, 0], t * 2.0)


@ts.jit
def shifted(x: ts.Tensor[[4, 8], F], y: ts.Out[[4, 8], F], n: ts.Scalar[ts.i32]):
    shifted_rows(x, y, n)


@pytest.mark.slow
def test_an_unchecked_build_storing_past_its_output_into_an_input_fails_the_run(tmp_path):
    base = np.zeros((8, 8), dtype=np.float32)
    y, x = torch.from_numpy(base[:4]), torch.from_numpy(base[4:])  # x lies right after y
    x.copy_(torch.arange(32.0).reshape(4, 8))
    checked = shifted.compile(build_dir=str(tmp_path / "checked"))
    with pytest.raises(ts.RuntimeFailure, match=r"store of y \(arg 1\).* is outside y's shape \[4, 8\]"):
        checked.run(x, y, 4)
    unchecked = shifted.compile(build_dir=str(tmp_path / "unchecked"), check_bounds=False)
    with pytest.raises(ts.RuntimeFailure, match=r"the run changed input 'x'.*the first at \[0, 1\] \(1.0 -> 2.0\)"):
        unchecked.run(x, y, 4)
