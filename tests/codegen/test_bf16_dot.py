"""``bf16_matmul="dot"``: a kernel's bf16 matmuls go through the CPU's bf16 dot-product instruction
(``matmul_dot``/``matmul_acc_dot``), with the exact build's bits for values that are not subnormal;
the default stays ``matmul``, other dtypes are untouched, and the choice survives every way a
build's C++ is written again (an IR-dump edit, the localizer's comparison with the generator)."""

import pytest
import torch

import tilescope as ts
from tilescope.analysis.localize.source_map import edited_lines

BF = ts.bf16


@ts.kernel
def proj(x: ts.Tensor[[16, 40], BF], w: ts.Tensor[[40, 48], BF], wf: ts.Tensor[[40, 48], ts.f32],
         y: ts.Out[[16, 48], ts.f32], z: ts.Out[[16, 48], ts.f32]):  # fmt: skip
    acc = ts.zeros([16, 48], ts.f32)
    for k in ts.range(0, 40, 20):
        acc = ts.matmul(ts.load(x, [0, k], [16, 20]), ts.load(w, [k, 0], [20, 48]), acc=acc)
    ts.store(y, [0, 0], acc)
    half = ts.matmul(ts.load(x, [0, 0], [16, 40]), ts.load(w, [0, 0], [40, 48]), acc=acc * 0.5)
    ts.store(z, [0, 0], half + ts.matmul(ts.cast(ts.load(x, [0, 0], [16, 40]), ts.f32), ts.load(wf, [0, 0], [40, 48])))


@ts.jit
def projected(x: ts.Tensor[[16, 40], BF], w: ts.Tensor[[40, 48], BF], wf: ts.Tensor[[40, 48], ts.f32],
              y: ts.Out[[16, 48], ts.f32], z: ts.Out[[16, 48], ts.f32]):  # fmt: skip
    proj(x, w, wf, y, z)


def _args(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 40, generator=g).to(torch.bfloat16)
    w = torch.randn(40, 48, generator=g).to(torch.bfloat16)
    return x, w, torch.randn(40, 48, generator=g), torch.zeros(16, 48), torch.zeros(16, 48)


def _kernel_text(prog) -> str:
    return (prog.work_dir / prog.kernels[0]["source"]).read_text()


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16_dot")
    exact = projected.compile(build_dir=str(root / "exact"))
    dot = projected.compile(build_dir=str(root / "dot"), bf16_matmul="dot")
    return exact, dot


def test_dot_calls_the_dot_kernels_for_bf16_only_and_the_default_does_not(builds):
    exact, dot = builds
    text = _kernel_text(dot)
    assert "matmul_acc_dot(acc, " in text  # acc = matmul(..., acc=acc), in place
    assert "matmul_dot(" in text.replace("matmul_acc_dot(", "")  # acc * 0.5 as the accumulator: a value
    assert "matmul(cast<float>(" in text  # the f32 matmul is untouched
    assert "_dot(" not in _kernel_text(exact)
    assert dot.runtime_config["bf16_matmul"] == "dot" and exact.runtime_config["bf16_matmul"] == "exact"


def test_dot_gives_the_exact_builds_bits(builds):
    exact, dot = builds
    a, b = _args(), _args()
    exact.run(*a)
    dot.run(*b)
    assert torch.equal(a[3], b[3]) and torch.equal(a[4], b[4])
    torch.testing.assert_close(b[3], a[0].float() @ a[1].float(), rtol=1e-5, atol=1e-4)
    c = _args()
    dot.run(*c, platform="interp")
    torch.testing.assert_close(c[3], b[3], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(c[4], b[4], rtol=1e-5, atol=1e-4)


def test_an_unedited_dot_build_shows_no_edited_line(builds):
    _, dot = builds
    assert edited_lines(dot, dot.program().kernels[0]) == []


def test_an_ir_edit_relowers_with_dot_kept(builds, tmp_path):
    _, dot = builds
    prog = projected.compile(build_dir=str(tmp_path), bf16_matmul="dot")
    ir = prog.work_dir / "ir" / "projected.py"
    text = ir.read_text()
    assert "acc * 0.5" in text
    ir.write_text(text.replace("acc * 0.5", "acc * 0.25"))
    again = ts.CompiledProgram.from_dir(prog.work_dir)
    source = _kernel_text(again)
    assert "0.25f" in source and "matmul_acc_dot(acc, " in source


def test_a_bad_choice_is_refused_naming_the_choices():
    with pytest.raises(ts.ConfigError, match=r"bf16_matmul.*'exact' or 'dot'"):
        projected.compile(bf16_matmul="fast")
