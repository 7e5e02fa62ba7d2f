"""ts.Weight: int8 weights packed once and kept from run to run, dropped when they change
(launch/weights.py, tile_weights.hpp), and what a program declaring one may and may not do."""

import gc
import runpy

import numpy as np
import pytest
import torch

import tilescope as ts
from tilescope.errors import AnnotationError, VerifyError
from tilescope.ir.printer import param_str
from tilescope.language.frontend import program_ir

M, K, N = 16, 64, 96  # N: whole vectors on every path (64 lanes at most per panel), no AMX shape


def build(weight_in_kernel=True, weight_in_program=True):
    """y = x @ w (int8 -> int32) in two tasks of 48 columns, the weight as ts.Weight or ts.Tensor."""
    kw = ts.Weight if weight_in_kernel else ts.Tensor
    pw = ts.Weight if weight_in_program else ts.Tensor

    @ts.kernel
    def mm(x: ts.Tensor[[M, K], ts.i8], w: kw[[K, 48], ts.i8], y: ts.Out[[M, 48], ts.i32]):
        acc = ts.zeros([M, 48], ts.i32)
        for k in ts.range(0, K, 32):
            acc = ts.matmul(ts.load(x, [0, k], [M, 32]), ts.load(w, [k, 0], [32, 48]), acc=acc)
        ts.store(y, [0, 0], acc)

    @ts.jit
    def layer(x: ts.Tensor[[M, K], ts.i8], w: pw[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
        for j in ts.range(0, N, 48):
            mm(x, w[:, j : j + 48], y[:, j : j + 48])

    return layer


def ints(shape, seed):
    return torch.randint(-128, 128, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int8)


def expected(x, w):
    return (x.long() @ w.long()).to(torch.int32)  # |sum| < 2^21: no wrap


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    import os

    old = os.environ.get("TILESCOPE_BUILD_DIR")
    os.environ["TILESCOPE_BUILD_DIR"] = str(tmp_path_factory.mktemp("weights") / "build_output")
    try:
        yield build().compile()
    finally:
        if old is None:
            os.environ.pop("TILESCOPE_BUILD_DIR", None)
        else:
            os.environ["TILESCOPE_BUILD_DIR"] = old


def run(prog, x, w):
    y = torch.zeros(M, N, dtype=torch.int32)
    prog.run(x, w, y)
    return y


@pytest.mark.slow
def test_the_kernel_reads_the_weight_through_the_cache_and_the_build_records_it(prog):
    src = (prog.work_dir / "kernels" / "cube" / "mm.cpp").read_text()
    assert "weight(view<32, 48>(w, {k, 0}" in src
    assert 'extern "C" void ts_weights_changed()' in src
    cfg = runpy.run_path(str(prog.work_dir / "kernel_config.py"))
    assert [a.get("weight") for a in cfg["ARGS"]] == [None, True, None]
    assert [a.get("weight") for a in cfg["KERNELS"][0]["params"]] == [None, True, None]
    assert [a.weight for a in type(prog).from_dir(prog.work_dir).args] == [False, True, False]


@pytest.mark.slow
def test_a_weight_changed_in_place_or_replaced_is_packed_again(prog):
    x, w = ints((M, K), 1), ints((K, N), 2)
    assert torch.equal(run(prog, x, w), expected(x, w))
    assert torch.equal(run(prog, x, w), expected(x, w))  # from the packed tiles
    w.add_(3)  # in place: torch counts it
    assert torch.equal(run(prog, x, w), expected(x, w))
    w2 = ints((K, N), 3)  # another tensor
    assert torch.equal(run(prog, x, w2), expected(x, w2))
    assert torch.equal(run(prog, x, w), expected(x, w))  # and back
    x2 = ints((M, K), 4)  # other activations, the same weight: the packed tiles serve
    assert torch.equal(run(prog, x2, w), expected(x2, w))


@pytest.mark.slow
def test_a_change_torch_does_not_count_is_not_seen_until_weights_changed(prog):
    """Writing through NumPy or w.data bypasses w's version counter: the packed tiles are kept
    (which shows the run reads them), until weights_changed() drops them."""
    x, w = ints((M, K), 5), ints((K, N), 6)
    before = expected(x, w)
    assert torch.equal(run(prog, x, w), before)
    w.numpy()[:] = np.int8(7)
    assert torch.equal(run(prog, x, w), before)  # stale, as documented
    prog.weights_changed()
    assert torch.equal(run(prog, x, w), expected(x, w))
    w.data.add_(1)
    assert torch.equal(run(prog, x, w), expected(x, w - 1))  # stale again
    prog.weights_changed()
    assert torch.equal(run(prog, x, w), expected(x, w))


@pytest.mark.slow
def test_a_new_tensor_over_the_same_memory_is_seen():
    """torch.from_numpy of one array, made again for each call after the array changed: another
    tensor object (its own version counter), so its tiles are packed again."""
    fn = build()
    x = ints((M, K), 12)
    a = ints((K, N), 13).numpy()
    y = torch.zeros(M, N, dtype=torch.int32)
    fn(x, torch.from_numpy(a), y)
    assert torch.equal(y, expected(x, torch.from_numpy(a)))
    a[:] = np.int8(-3)
    fn(x, torch.from_numpy(a), y)
    assert torch.equal(y, expected(x, torch.from_numpy(a)))
    a[:] = np.int8(5)
    fn.weights_changed()  # the jit function's own builds
    fn(x, torch.from_numpy(a), y)
    assert torch.equal(y, expected(x, torch.from_numpy(a)))


@pytest.mark.slow
def test_one_program_for_every_layer_keeps_each_layers_tiles(prog):
    """Weights passed in turn (a program run once per layer): each one's packed tiles are kept.
    Shown by a change torch does not count to layer 0's weight: the next run with it still reads
    the tiles packed before."""
    x = ints((M, K), 14)
    layers = [ints((K, N), 15 + i) for i in range(3)]
    for w in layers:
        assert torch.equal(run(prog, x, w), expected(x, w))
    before = expected(x, layers[0])
    layers[0].numpy()[:] = np.int8(1)
    for w in layers[1:]:
        assert torch.equal(run(prog, x, w), expected(x, w))
    assert torch.equal(run(prog, x, layers[0]), before)  # layer 0's tiles were kept, as documented
    prog.weights_changed()
    assert torch.equal(run(prog, x, layers[0]), expected(x, layers[0]))


@pytest.mark.slow
def test_a_freed_weight_is_forgotten(prog):
    x, w = ints((M, K), 20), ints((K, N), 21)
    assert torch.equal(run(prog, x, w), expected(x, w))
    watch = prog.binaries().weights[None]
    assert any(k[0] == w.data_ptr() for k in watch.seen)
    ptr = w.data_ptr()
    del w
    gc.collect()
    assert not any(k[0] == ptr for k in watch.seen)


@pytest.mark.slow
def test_a_weight_that_is_also_an_output_is_refused(prog):
    @ts.kernel
    def mm2(x: ts.Tensor[[M, K], ts.i8], w: ts.Weight[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
        ts.store(y, [0, 0], ts.matmul(ts.load(x, [0, 0], [M, K]), ts.load(w, [0, 0], [K, N])))

    @ts.jit
    def layer(x: ts.Tensor[[M, K], ts.i8], w: ts.Weight[[K, N], ts.i8], y: ts.Out[[M, N], ts.i32]):
        mm2(x, w, y)

    x = ints((M, K), 22)
    y = torch.zeros(M, N, dtype=torch.int32)
    w = y.view(torch.int8).view(K, N)  # the weight's bytes are the output's
    with pytest.raises(ts.ArgumentError, match=r"argument 'w' \(a ts.Weight\) shares memory with argument 'y'"):
        layer(x, w, y)


@pytest.mark.slow
def test_a_weight_another_program_writes_is_seen_to_change(prog):
    @ts.kernel
    def fill(src: ts.Tensor[[K, N], ts.i8], dst: ts.Out[[K, N], ts.i8]):
        ts.store(dst, [0, 0], ts.load(src, [0, 0], [K, N]))

    @ts.jit
    def copy(src: ts.Tensor[[K, N], ts.i8], dst: ts.Out[[K, N], ts.i8]):
        fill(src, dst)

    x, w = ints((M, K), 7), ints((K, N), 8)
    assert torch.equal(run(prog, x, w), expected(x, w))
    version = w._version
    copy(ints((K, N), 9), w)  # a sim run writes w in place
    assert w._version > version
    assert torch.equal(run(prog, x, w), expected(x, w))


@pytest.mark.slow
def test_interp_agrees(prog):
    x, w = ints((M, K), 10), ints((K, N), 11)
    y = torch.zeros(M, N, dtype=torch.int32)
    prog.run(x, w, y, platform="interp")
    assert torch.equal(y, expected(x, w))
    assert torch.equal(run(prog, x, w), y)


def test_the_annotation_prints_back_as_itself():
    program = program_ir(build())
    mm = next(k for k in program.kernels if k.name == "mm")
    assert param_str(mm.params[1]) == "w: ts.Weight[[64, 48], ts.i8]"
    assert param_str(program.params[1]) == "w: ts.Weight[[64, 96], ts.i8]"
    assert param_str(mm.params[0]) == "x: ts.Tensor[[16, 64], ts.i8]"


def test_a_weight_annotation_without_shape_names_itself():
    with pytest.raises(AnnotationError, match=r"ts\.Weight\[\.\.\.\] takes a shape and a dtype"):
        ts.Weight[ts.i8]


def test_a_kernel_weight_given_a_plain_input_is_refused():
    with pytest.raises(VerifyError) as e:
        build(weight_in_kernel=True, weight_in_program=False).compile()
    msg = str(e.value)
    assert "kernel mm's ts.Weight param 'w' is given the ts.Tensor param 'w'" in msg
    assert "declare w as ts.Weight[...] in the orchestration" in msg


@ts.kernel
def use(w: ts.Weight[[K, N], ts.i8], y: ts.Out[[K, N], ts.i8]):
    ts.store(y, [0, 0], ts.load(w, [0, 0], [K, N]))


@ts.kernel
def make(y: ts.Out[[K, N], ts.i8]):
    ts.store(y, [0, 0], ts.zeros([K, N], ts.i8))


def test_a_kernel_weight_given_an_intermediate_is_refused():
    @ts.jit
    def prog(y: ts.Out[[K, N], ts.i8]):
        t = ts.create_tensor([K, N], ts.i8)
        make(t)
        use(t, y)

    with pytest.raises(VerifyError, match=r"kernel use's ts.Weight param 'w' is given 't', which may hold a tensor the orchestration creates"):
        prog.compile()


def test_a_kernel_weight_given_a_variable_that_may_hold_an_intermediate_is_refused():
    @ts.jit
    def prog(w: ts.Weight[[K, N], ts.i8], y: ts.Out[[K, N], ts.i8], n: ts.Scalar[ts.i32]):
        s = ts.create_tensor([K, N], ts.i8)
        make(s)
        t = s
        if n > 0:
            t = w
        use(t, y)

    with pytest.raises(VerifyError, match=r"is given 't', which may hold a tensor the orchestration creates"):
        prog.compile()


def test_a_kernel_weight_given_a_written_param_says_to_declare_the_kernel_param_a_tensor():
    @ts.jit
    def prog(t: ts.Out[[K, N], ts.i8], y: ts.Out[[K, N], ts.i8]):
        make(t)
        use(t, y)

    with pytest.raises(VerifyError) as e:
        prog.compile()
    assert "kernel use's ts.Weight param 'w' is given the ts.Out param 't'" in str(e.value)
    assert "declare w as ts.Tensor[...] in kernel use (t is written)" in str(e.value)


def test_a_program_weight_given_to_a_kernel_output_is_refused():
    @ts.kernel
    def clear(y: ts.Out[[K, N], ts.i8]):
        ts.store(y, [0, 0], ts.zeros([K, N], ts.i8))

    @ts.jit
    def prog(w: ts.Weight[[K, N], ts.i8]):
        clear(w)

    with pytest.raises(VerifyError, match=r"kernel clear writes its out param 'y', but it is given the In param 'w'"):
        prog.compile()


@pytest.mark.slow
def test_a_task_with_a_weight_replayed_alone_packs_its_own(prog):
    """`tilescope replay --task`: the kernel alone on saved inputs (its own view's watch), twice,
    the second time with another saved weight: each replay's result is its own weight's."""
    from tilescope.debug.failures import SavedArg, save_task_inputs
    from tilescope.launch.task import replay_task

    x = ints((M, K), 23)
    for task in (0, 1):  # the two tasks of mm, saved with different weights
        w = ints((K, 48), 24 + task)
        args = [SavedArg(0, "x", "input", x), SavedArg(1, "w", "input", w),
                SavedArg(2, "y", "output", torch.zeros(M, 48, dtype=torch.int32))]  # fmt: skip
        save_task_inputs(prog.work_dir, task, "mm", "mm", 0, args, "saved by the test")
        result = replay_task(prog.work_dir, task, isolate=False)
        assert result.passed, result.error
        assert torch.equal(result.outputs["y"], expected(x, w))
