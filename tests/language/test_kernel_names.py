"""Kernel names: ``@ts.kernel(name=...)``, ``@ts.kernel()``, ``.name``, and the distinct names the
kernels a factory specialises get in one program (the front-end's IR; runs are in
tests/system/test_kernel_factories.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import dsl_error, line_of

import tilescope as ts
from tilescope.errors import DSLError, VerifyError
from tilescope.ir.nodes import Submit
from tilescope.ir.printer import program_str
from tilescope.ir.traverse import walk_exprs
from tilescope.language.frontend import load_source


def submitted(program) -> list[str]:
    """The kernel each Submit of the orchestration names, in order."""
    return [e.kernel for e in walk_exprs(program.body) if isinstance(e, Submit)]


def roundtrips(program) -> None:
    """The printed IR parses back to the same program, and prints the same."""
    text = program_str(program)
    again = load_source(text, "<printed>")
    assert again == program
    assert program_str(again) == text


# -- a factory's kernels ---------------------------------------------------------------------------


def mm_factory(BM, BN, K=64):
    @ts.kernel
    def mm_block(a: ts.Tensor[[BM, K], ts.f32], b: ts.Tensor[[K, BN], ts.f32], c: ts.Out[[BM, BN], ts.f32]):
        ts.store(c, [0, 0], ts.matmul(ts.load(a, [0, 0], [BM, K]), ts.load(b, [0, 0], [K, BN])))

    return mm_block


mm_big, mm_small, mm_big_again = mm_factory(64, 32), mm_factory(32, 32), mm_factory(64, 32)


@ts.jit
def two_shapes(a: ts.Tensor[[96, 64], ts.f32], b: ts.Tensor[[64, 32], ts.f32], c: ts.Out[[96, 32], ts.f32]):
    mm_big(a[0:64, :], b, c[0:64, :])
    mm_small(a[64:96, :], b, c[64:96, :])
    mm_big_again(a[0:64, :], b, c[0:64, :])  # the same constants: the same kernel as mm_big


def test_a_factorys_kernels_get_the_differing_constants_as_their_names():
    # was: two different kernels are named 'mm_block'
    p = two_shapes.program()
    assert [k.name for k in p.kernels] == ["mm_block_BM64", "mm_block_BM32"]
    assert submitted(p) == ["mm_block_BM64", "mm_block_BM32", "mm_block_BM64"]
    assert [k.params[0].type.shape for k in p.kernels] == [(64, 64), (32, 64)]
    assert mm_big.name == mm_small.name == "mm_block"  # the kernel object keeps its own name
    text = program_str(p)
    assert "def mm_block_BM64(a: ts.Tensor[[64, 64], ts.f32]" in text
    assert "    mm_block_BM32(a[64:96, :], b, c[64:96, :])" in text
    roundtrips(p)


def test_a_factorys_kernel_keeps_the_line_of_its_def():
    p = two_shapes.program()
    line = line_of(mm_factory, "def mm_block(")
    assert [k.loc.line for k in p.kernels] == [line, line]
    assert {s.loc.line for k in p.kernels for s in k.body} == {line_of(mm_factory, "ts.store(c")}


@ts.jit
def one_kernel_twice(
    a: ts.Tensor[[128, 64], ts.f32], b: ts.Tensor[[64, 32], ts.f32], c: ts.Out[[128, 32], ts.f32]
):
    for i in ts.range(0, 128, 64):
        mm_big(a[i : i + 64, :], b, c[i : i + 64, :])
    mm_big_again(a[0:64, :], b, c[0:64, :])


def test_one_kernel_called_twice_is_one_kernel_with_its_own_name():
    p = one_kernel_twice.program()
    assert [k.name for k in p.kernels] == ["mm_block"]
    assert submitted(p) == ["mm_block", "mm_block"]


def _strip_factory(BM, BN):
    mm = mm_factory(BM, BN)

    @ts.kernel
    def mm_block(a: ts.Tensor[[BM, 64], ts.f32], c: ts.Out[[BM, BN], ts.f32]):
        ts.store(c, [0, 0], ts.load(a, [0, 0], [BM, BN]) * 2.0)

    return mm, mm_block


mm_a, strip_a = _strip_factory(32, 32)
mm_b, strip_b = _strip_factory(32, 16)


@ts.jit
def four_of_a_name(
    a: ts.Tensor[[32, 64], ts.f32], b: ts.Tensor[[64, 32], ts.f32], c: ts.Out[[32, 32], ts.f32],
    d: ts.Out[[32, 16], ts.f32], e: ts.Out[[32, 32], ts.f32], f: ts.Out[[32, 16], ts.f32],
):  # fmt: skip
    mm_a(a, b, c)
    mm_b(a, b[:, 0:16], d)
    strip_a(a, e)
    strip_b(a, f)


def test_kernels_whose_constants_do_not_tell_them_apart_are_numbered_in_first_use_order():
    # four kernels named mm_block: two factories, each specialised on BN; BN alone does not tell
    # mm_block(BN=32) of one factory from the other's, so the names count in first-use order
    p = four_of_a_name.program()
    assert [k.name for k in p.kernels] == ["mm_block", "mm_block_2", "mm_block_3", "mm_block_4"]
    assert submitted(p) == ["mm_block", "mm_block_2", "mm_block_3", "mm_block_4"]
    roundtrips(p)


def _twice():
    @ts.kernel
    def scale(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * 2.0)

    return scale


def _thrice():
    @ts.kernel
    def scale(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * 3.0)

    return scale


def _typed(dtype, mode, eps):
    @ts.kernel
    def convert(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], dtype]):
        t = ts.load(x, [0, 0], [8, 16]) + eps
        ts.store(y, [0, 0], ts.cast(t, dtype, mode=mode))

    return convert


scale2, scale3 = _twice(), _thrice()
to_bf16, to_f16 = _typed(ts.bf16, "rint", 0.5), _typed(ts.f16, "floor", -0.25)


@ts.jit
def scales(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32], z: ts.Out[[8, 16], ts.f32],
           u: ts.Out[[8, 16], ts.bf16], v: ts.Out[[8, 16], ts.f16]):  # fmt: skip
    scale2(x, y)
    scale3(x, z)
    to_bf16(x, u)
    to_f16(x, v)


def test_names_without_constants_count_and_constants_of_every_kind_spell_out():
    p = scales.program()
    assert [k.name for k in p.kernels] == [
        "scale", "scale_2", "convert_dtypebf16_eps0p5_moderint", "convert_dtypef16_epsm0p25_modefloor"
    ]  # fmt: skip
    roundtrips(p)


def test_the_names_are_the_same_in_another_process():
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import test_kernel_names as t; "
        "print([k.name for p in (t.two_shapes, t.four_of_a_name, t.scales) for k in p.program().kernels])"
    )
    here = Path(__file__).resolve()
    out = subprocess.run(
        [sys.executable, "-c", code, str(here.parent), str(here.parents[1])],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout  # fmt: skip
    names = [k.name for p in (two_shapes, four_of_a_name, scales) for k in p.program().kernels]
    assert out.strip() == str(names)


# -- names that the printed IR needs ---------------------------------------------------------------


def _copy_named(name):
    @ts.kernel(name=name)
    def copy(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]))

    return copy


def _kernels_named_tmp_and_twin():
    @ts.kernel
    def tmp(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) + 1.0)

    @ts.kernel
    def twin(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * 2.0)

    return tmp, twin


add_one, double = _kernels_named_tmp_and_twin()


@ts.jit
def uses_tmp(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    tmp = ts.create_tensor([8, 16], ts.f32)  # an orchestration variable named as the kernel add_one
    add_one(x, tmp)
    double(tmp, y)


@ts.jit
def twin(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):  # the orchestration named as double
    double(x, y)


def test_a_kernel_named_as_an_orchestration_variable_or_the_orchestration_is_renamed():
    # its printed call would find the variable (or the orchestration) instead of the kernel
    p = uses_tmp.program()
    assert [k.name for k in p.kernels] == ["tmp_2", "twin"]
    assert "    tmp_2(x, tmp)" in program_str(p)
    roundtrips(p)
    p = twin.program()
    assert [k.name for k in p.kernels] == ["twin_2"]
    roundtrips(p)


# -- @ts.kernel(name=...), @ts.kernel(), .name -----------------------------------------------------


@ts.kernel(name="mm_128x64")
def named(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]))


@ts.kernel()
def parenthesized(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * 0.5)


@ts.jit
def named_prog(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32], z: ts.Out[[8, 16], ts.f32]):
    named(x, y)
    parenthesized(x, z)


def test_a_given_name_names_the_kernel_and_parentheses_are_accepted():
    assert named.name == "mm_128x64" and repr(named) == "<ts.kernel mm_128x64>"
    assert parenthesized.name == "parenthesized"
    p = named_prog.program()
    assert [k.name for k in p.kernels] == ["mm_128x64", "parenthesized"]
    assert "def mm_128x64(x: ts.Tensor[[8, 16], ts.f32]" in program_str(p)
    roundtrips(p)


copy_a, copy_b = _copy_named("copy_a"), _copy_named("copy")


@ts.kernel
def copy(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * 4.0)


@ts.jit
def given_and_def(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32], z: ts.Out[[8, 16], ts.f32]):
    copy(x, y)  # named by its def 'copy', which the next kernel was given: this one gives way
    copy_b(x, z)
    copy_a(x, y)


def test_a_given_name_is_kept_and_a_def_name_gives_way_to_it():
    p = given_and_def.program()
    assert [k.name for k in p.kernels] == ["copy_2", "copy", "copy_a"]
    assert submitted(p) == ["copy_2", "copy", "copy_a"]
    roundtrips(p)


copy_x, copy_y = _copy_named("same"), _copy_named("same")
scaled_same = ts.kernel(name="same")(scale3.fn)


@ts.jit
def one_name_twice(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    copy_x(x, y)
    copy_y(x, y)  # the same IR: the same kernel
    scaled_same(x, y)


def test_two_different_kernels_given_one_name_is_an_error_with_both_places():
    e = dsl_error(one_name_twice)
    assert isinstance(e, VerifyError)
    here = __file__
    assert e.message == (
        "two different kernels are named 'same' by @ts.kernel(name=...): this one (defined at "
        f"{here}:{line_of(_thrice, 'def scale(')}) and the one first called at "
        f"{here}:{line_of(one_name_twice, 'copy_x(x, y)')} (defined at {here}:{line_of(_copy_named, 'def copy(')})"
    )
    assert str(e.loc) == f"{here}:{line_of(one_name_twice, 'scaled_same(x, y)')}"
    assert e.hint == (
        'give each kernel its own name= (in a factory, from its parameters: name=f"mm_{BM}x{BN}"), or leave '
        "name= out and tilescope names them apart"
    )


named_x = _copy_named("x")
named_orch = _copy_named("orch_named")


@ts.jit
def param_named(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    named_x(x, y)


@ts.jit
def orch_named(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    named_orch(x, y)


conv_f16, conv_bf16 = (ts.kernel(name="conv")(_typed(dt, "rint", 0.0).fn) for dt in (ts.f16, ts.bf16))


@ts.jit
def one_factory_one_name(
    x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f16], z: ts.Out[[8, 16], ts.bf16]
):
    conv_f16(x, y)
    conv_bf16(x, z)


def test_one_name_given_to_two_kernels_of_one_factory_is_an_error_naming_the_def():
    e = dsl_error(one_factory_one_name)
    here = __file__
    assert e.message == (
        "two different kernels are named 'conv' by @ts.kernel(name=...): this one and the one first called at "
        f"{here}:{line_of(one_factory_one_name, 'conv_f16(x, y)')}, both made by the def at "
        f"{here}:{line_of(_typed, 'def convert(')} (a factory's, with different constants)"
    )
    assert str(e.loc) == f"{here}:{line_of(one_factory_one_name, 'conv_bf16(x, z)')}"


def test_a_given_name_that_the_orchestration_uses_is_an_error():
    e = dsl_error(param_named)
    assert (
        e.message
        == "kernel name 'x' (@ts.kernel(name=...)) is also a parameter of the orchestration param_named"
    )
    assert e.hint == "the printed IR calls the kernel by its name there: give the kernel another name="
    assert str(e.loc) == f"{__file__}:{line_of(param_named, 'named_x(x, y)')}"
    e = dsl_error(orch_named)
    assert (
        e.message
        == "kernel name 'orch_named' (@ts.kernel(name=...)) is also the orchestration's name (orch_named)"
    )


RULE = (
    "a kernel name is a letter, then letters, digits and underscores (no '__'), at most 64 characters, and "
    "not a Python keyword or builtin or 'ts'"
)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("mm-128", "'mm-128' has '-', which is not a letter, digit or underscore"),
        ("mm 128", "'mm 128' has ' ', which is not a letter, digit or underscore"),
        ("matmul_é", "'matmul_é' has 'é', which is not a letter, digit or underscore"),
        ("1mm", "'1mm' does not start with a letter"),
        ("_mm", "'_mm' does not start with a letter"),
        ("", "the name is empty"),
        ("mm__block", "'mm__block' has '__', which C++ reserves (the build names the kernel FUNC_MM__BLOCK)"),
        ("for", "'for' is a Python keyword (the printed IR defines the kernel as 'def for(...)')"),
        ("ts", "'ts' is the tilescope module in DSL code and in the printed IR"),
        ("float", "'float' is a Python builtin, which the kernel's name would hide in the printed IR"),
        ("m" * 65, "'mmmmmmmmmmmmmmmmmmmm'... is 65 characters long, more than 64"),
        (3, "a string is needed, got 3 (int)"),
    ],
)
def test_a_bad_name_is_an_error_naming_the_argument_and_what_is_allowed(name, problem):
    with pytest.raises(DSLError) as info:
        ts.kernel(name=name)
    e = info.value
    assert e.message == f"@ts.kernel(name={name!r}): not a kernel name: {problem}"
    assert e.hint == f'{RULE}, e.g. @ts.kernel(name="mm_128x64")'
    here = test_a_bad_name_is_an_error_naming_the_argument_and_what_is_allowed
    assert str(e.loc) == f"{__file__}:{line_of(here, 'ts.kernel(name=name)')}"  # the decorating line


def test_a_name_of_64_characters_is_accepted():
    assert _copy_named("m" * 64).name == "m" * 64


def test_setting_name_before_the_first_compile_names_the_kernel():
    k = _copy_named(None)
    assert k.name == "copy" and not k.name_given
    k.name = "copy_rows"
    assert k.name == "copy_rows" and k.name_given

    @ts.jit
    def renamed_prog(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        k(x, y)

    assert [kk.name for kk in renamed_prog.program().kernels] == ["copy_rows"]


def test_setting_a_bad_name_or_renaming_a_compiled_kernel_is_an_error():
    k = _copy_named(None)
    with pytest.raises(DSLError) as info:
        k.name = "copy-rows"
    line = line_of(test_setting_a_bad_name_or_renaming_a_compiled_kernel_is_an_error, 'k.name = "copy-rows"')
    assert info.value.message == (
        "kernel copy: .name = 'copy-rows' is not a kernel name: 'copy-rows' has '-', which is not a letter, digit "
        "or underscore"
    )
    assert info.value.hint == f"{RULE}, e.g. 'mm_128x64'"
    assert str(info.value.loc) == f"{__file__}:{line}"
    assert k.name == "copy"

    @ts.jit
    def compiled_prog(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
        k(x, y)

    compiled_prog.program()
    with pytest.raises(DSLError) as info:
        k.name = "copy_rows"
    assert info.value.message == (
        "kernel copy: .name cannot change once the kernel is compiled (a program holds it under its name)"
    )
    assert info.value.hint == (
        "name it where it is made: @ts.kernel(name='copy_rows'), or set .name before its first compile"
    )
    assert k.name == "copy"
    k.name = "copy"  # its own name again changes nothing
