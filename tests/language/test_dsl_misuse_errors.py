"""More bad input in the DSL and the harness, each a clear error: it names the thing, what was
expected and what to do (DSL errors at the user's file:line), never a raw traceback from
tilescope's internals, a misleading message or a silently ignored option."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import dsl_error, line_of

import tilescope as ts
from tilescope.errors import DSLError
from tilescope.harness import TensorSpec, run_jit

import vector_dag

ROOT = Path(__file__).resolve().parents[2]
F = ts.f32
T = ts.Tensor[[8, 16], F]
OUT = ts.Out[[8, 16], F]


def at(e: DSLError, fn, text: str) -> bool:
    """Whether ``e`` points at the line of ``fn`` holding ``text``."""
    return str(e.loc) == f"{__file__}:{line_of(fn, text)}"


# -- DSL: ops, values and names -------------------------------------------------------------------


@ts.kernel
def zeros_of_a_torch_dtype(x: T, y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) + ts.zeros([8, 16], torch.float32))  # torch dtype


@ts.jit
def p_zeros_of_a_torch_dtype(x: T, y: OUT):
    zeros_of_a_torch_dtype(x, y)


def test_a_torch_dtype_given_to_an_op_names_the_tilescope_one():
    e = dsl_error(p_zeros_of_a_torch_dtype)  # was "dtype must be a dtype such as ts.f32, got torch.float32"
    assert at(e, zeros_of_a_torch_dtype, "# torch dtype")
    assert e.message == (
        "ts.zeros dtype must be a tilescope dtype such as ts.f32, got torch.float32 (dtype); write ts.f32"
    )


@ts.kernel
def sqrt_of_a_number(x: T, y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * ts.sqrt(2.0))  # a number


@ts.jit
def p_sqrt_of_a_number(x: T, y: OUT):
    sqrt_of_a_number(x, y)


def test_an_elementwise_op_on_a_number_says_how_to_compute_it_in_python():
    e = dsl_error(p_sqrt_of_a_number)  # had no hint
    assert at(e, sqrt_of_a_number, "# a number")
    assert e.message == "ts.sqrt needs a tile operand, got 2.0 (float)"
    assert e.hint == "ts.* ops compute on tiles; compute a compile-time number in Python: math.sqrt(2.0)"


WEIGHTS = torch.ones(8, 16)


@ts.kernel
def times_a_captured_tensor(x: T, y: OUT):
    n = WEIGHTS.shape[1]  # a compile-time shape: fine
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, n]) * WEIGHTS)  # captured


@ts.jit
def p_times_a_captured_tensor(x: T, y: OUT):
    times_a_captured_tensor(x, y)


@ts.kernel
def loads_a_captured_tensor(x: T, y: OUT):
    ts.store(y, [0, 0], ts.load(WEIGHTS, [0, 0], [8, 16]))


@ts.jit
def p_loads_a_captured_tensor(x: T, y: OUT):
    loads_a_captured_tensor(x, y)


def test_a_torch_tensor_from_the_enclosing_scope_is_named_with_how_to_pass_it():
    e = dsl_error(p_times_a_captured_tensor)  # was the tensor's whole repr "... cannot be used as an operand"
    assert at(e, times_a_captured_tensor, "# captured")
    assert e.message == (
        "WEIGHTS is a torch tensor (shape [8, 16], torch.float32) from the enclosing scope: a @ts.kernel reads "
        "tensors only through its parameters"
    )
    assert e.hint == (
        "pass it as a parameter: 'WEIGHTS: ts.Tensor[[8, 16], ts.f32]' in the kernel and in the @ts.jit "
        "function, and the tensor as an argument when you call it"
    )
    assert dsl_error(p_loads_a_captured_tensor).message == e.message
    assert "tensor([[" not in str(e)


@ts.kernel
def scaled(x: T, s: ts.Scalar[F], y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * s)


@ts.jit
def p_passes_an_i32_scalar(x: T, n: ts.Scalar[ts.i32], y: OUT):
    scaled(x, n, y)  # i32 into f32


@ts.jit
def p_passes_a_loop_index(x: T, y: OUT):
    for i in ts.range(0, 2):
        scaled(x, i, y)  # index into f32


@ts.kernel
def scaled_by_an_int(x: T, s: ts.Scalar[ts.i32], y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * s)


@ts.jit
def p_passes_a_loop_index_to_an_int(x: T, y: OUT):
    for i in ts.range(0, 2):
        scaled_by_an_int(x, i, y)


def test_a_scalar_of_another_dtype_for_a_kernel_parameter_says_which_declaration_to_change():
    e = dsl_error(p_passes_an_i32_scalar)  # the hint was "cast it explicitly": no cast exists there
    assert at(e, p_passes_an_i32_scalar, "# i32 into f32")
    assert e.message == "kernel scaled parameter 's' expects a scalar f32, got a scalar i32"
    assert e.hint == (
        "an orchestration does not convert scalars: declare both parameters with one dtype (the kernel's as "
        "ts.Scalar[ts.i32]: in the kernel a scalar adopts the dtype of the tile it meets, t * s)"
    )
    e = dsl_error(p_passes_a_loop_index)  # had no hint
    assert at(e, p_passes_a_loop_index, "# index into f32")
    assert e.message == "kernel scaled parameter 's' expects a scalar f32, got an index (an integer)"
    assert e.hint == (
        "declare the kernel's parameter as ts.Scalar[ts.i32] (or ts.i64): in the kernel a scalar adopts the "
        "dtype of the tile it meets, t * s"
    )
    p_passes_a_loop_index_to_an_int.program()  # what the hint says compiles


@ts.kernel
def copy_rows(x: ts.Tensor[[4, 16], F], y: ts.Out[[4, 16], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [4, 16]))


@ts.jit
def p_empty_region(x: T, y: OUT):
    copy_rows(x[4:4, :], y[0:4, :])  # empty


def test_an_empty_slice_is_called_empty_not_outside_the_tensor():
    e = dsl_error(p_empty_region)  # was "[4, 4) is outside the tensor's shape [8, 16]"
    assert at(e, p_empty_region, "# empty")
    assert e.message == (
        "slice of x dim 0: [4, 4) is empty (start 4 >= stop 4); a region holds at least one element"
    )
    assert e.hint == "slice a:b with a < b"


@ts.inline
def doubled_without_return(t):
    u = t * 2.0  # noqa: F841 - the helper forgets to return it


@ts.kernel
def uses_a_helper_without_return(x: T, y: OUT):
    ts.store(y, [0, 0], doubled_without_return(ts.load(x, [0, 0], [8, 16])))  # no value


@ts.jit
def p_uses_a_helper_without_return(x: T, y: OUT):
    uses_a_helper_without_return(x, y)


@ts.kernel
def assigns_a_store(x: T, y: OUT):
    z = ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]))  # noqa: F841


@ts.jit
def p_assigns_a_store(x: T, y: OUT):
    assigns_a_store(x, y)


def test_a_call_without_a_value_used_as_one_is_named():
    e = dsl_error(p_uses_a_helper_without_return)  # was "ts.store's value must be a tile, got None"
    assert at(e, uses_a_helper_without_return, "# no value")
    assert e.message == "@ts.inline helper doubled_without_return has no value: it ends without 'return'"
    assert e.hint == "end the helper with 'return <value>', or call it on a line of its own"
    e = dsl_error(p_assigns_a_store)
    assert e.message == "ts.store(...) has no value"
    assert e.hint == "call it on a line of its own, not as a value"


@ts.kernel
def formats_a_string(x: T, y: OUT):
    label = f"x{1}"  # noqa: F841 - an f-string
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]))


@ts.jit
def p_formats_a_string(x: T, y: OUT):
    formats_a_string(x, y)


def test_python_syntax_the_dsl_lacks_is_named_as_python_names_it():
    e = dsl_error(p_formats_a_string)  # was "JoinedStr expressions are not supported"
    assert at(e, formats_a_string, "# noqa: F841 - an f-string")
    assert e.message == "f-strings are not supported in a @ts.kernel"
    assert (
        e.hint
        == "the Python that DSL code may use is listed in docs/dsl.md ('Python that works, and what does not')"
    )


@ts.kernel
def calls_a_tile_method(x: T, y: OUT):
    t = ts.load(x, [0, 0], [8, 16])
    ts.store(y, [0, 0], t.exp())  # a method


@ts.jit
def p_calls_a_tile_method(x: T, y: OUT):
    calls_a_tile_method(x, y)


@ts.kernel
def shape_of_a_scalar(x: T, s: ts.Scalar[F], y: OUT):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]) * s.shape[0])


@ts.jit
def p_shape_of_a_scalar(x: T, s: ts.Scalar[F], y: OUT):
    shape_of_a_scalar(x, s, y)


def test_a_method_call_on_a_tile_names_the_op_to_call_instead():
    e = dsl_error(
        p_calls_a_tile_method
    )  # was "t is a tile here, not the tilescope module" (no ts was shadowed)
    assert at(e, calls_a_tile_method, "# a method")
    assert e.message == "a tile[8, 16] f32 has no methods: ts.exp is an op"
    assert e.hint == "write ts.exp(t)"
    e = dsl_error(p_shape_of_a_scalar)  # the hint listed shape and ndim, which a scalar lacks
    assert e.message == "a scalar f32 has no attribute 'shape' in the DSL"
    assert e.hint == "available: dtype"


@ts.inline
def recursive(t):
    return recursive(t) + 1.0


@ts.kernel
def calls_a_recursive_helper(x: T, y: OUT):
    ts.store(y, [0, 0], recursive(ts.load(x, [0, 0], [8, 16])))


@ts.jit
def p_calls_a_recursive_helper(x: T, y: OUT):
    calls_a_recursive_helper(x, y)


def test_a_recursive_helper_is_an_error_at_its_call():
    e = dsl_error(p_calls_a_recursive_helper)  # clear before: kept so
    assert at(e, recursive, "return recursive(t)")
    assert e.message == "@ts.inline helpers nest too deeply (recursion in recursive?)"


def test_a_dsl_function_without_a_source_file_says_where_to_define_it():
    namespace = {"ts": ts, "T": T, "OUT": OUT}
    exec(  # clear before: kept so
        "@ts.kernel\ndef k(x: T, y: OUT):\n    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 16]))\n\n"
        "@ts.jit\ndef p(x: T, y: OUT):\n    k(x, y)\n",
        namespace,
    )
    e = dsl_error(namespace["p"])
    assert e.message == "cannot read the source of p"
    assert e.hint == "tilescope compiles DSL functions from their source: define them in a .py file"


# -- the harness -------------------------------------------------------------------------------------


def _error(capsys, result) -> str:
    """The run failed with an [ERROR] line and no traceback; its message."""
    captured = capsys.readouterr()
    assert not result.passed and result.error
    assert f"[ERROR] {result.error}\n" in captured.err
    assert "Traceback" not in captured.err + captured.out
    return result.error


def _specs(**is_output):
    return [
        TensorSpec(s.name, s.shape, s.dtype, s.init_value, is_output.get(s.name, s.is_output))
        for s in vector_dag.SPECS
    ]


@pytest.mark.slow
def test_a_spec_whose_is_output_disagrees_with_the_parameter_is_refused_before_the_run(capsys):
    result = run_jit(
        vector_dag.vector_dag, _specs(out=False), golden_fn=vector_dag.golden
    )  # was a raw KeyError
    assert _error(capsys, result) == (
        "TensorSpec 'out' has is_output=False, but 'out' is an out parameter of vector_dag, which the run "
        "writes: set is_output=True so it is compared with the golden"
    )
    result = run_jit(vector_dag.vector_dag, _specs(x=True), golden_fn=vector_dag.golden)  # was a PASS
    assert _error(capsys, result) == (
        "TensorSpec 'x' has is_output=True, but 'x' is an in parameter of vector_dag (read only, never written or "
        "compared): drop is_output, or declare the parameter ts.Out[...] / ts.InOut[...]"
    )
    assert result.num_tasks == 0  # nothing ran


def test_a_golden_or_compare_fn_that_is_not_a_function_is_refused_before_anything_runs(capsys):
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn="golden")  # was "raised: TypeError"
    assert _error(capsys, result) == (
        "golden_fn must be a function (or None), got 'golden' (str): pass the function itself, golden_fn=name, "
        "without calling it or quoting its name"
    )
    assert result.work_dir is None  # nothing compiled
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=vector_dag.golden, compare_fn=True)
    assert _error(capsys, result).startswith("compare_fn must be a function (or None), got True (bool)")


def test_options_that_are_not_dicts_are_a_failed_run_not_a_raw_exception(capsys):
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, runtime_cfg="interp")  # raised a raw ValueError
    assert _error(capsys, result) == (
        "runtime_cfg must be a dict of options (runtime_cfg={'platform': 'interp'}), got 'interp' (str)"
    )
    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, compile_cfg=["check_bounds"])  # a raw TypeError
    assert _error(capsys, result) == (
        "compile_cfg must be a dict of options (compile_cfg={'check_bounds': False}), got ['check_bounds'] (list)"
    )


@pytest.mark.slow
def test_a_golden_fn_that_writes_a_misspelt_output_is_told_so(capsys):
    def golden_typo(t):
        t["output"] = t["x"] + t["y"]

    result = run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=golden_typo)  # was 100% mismatches
    assert _error(capsys, result) == (
        "golden_fn test_a_golden_fn_that_writes_a_misspelt_output_is_told_so.<locals>.golden_typo set "
        "t['output'], which is not an argument of the program, and left the output t['out'] as it started: "
        "write the golden into the output in place (t['out'][:] = ...)"
    )

    def golden_with_scratch(t):
        t["scratch"] = t["x"] * 2
        vector_dag.golden(t)

    assert run_jit(vector_dag.vector_dag, vector_dag.SPECS, golden_fn=golden_with_scratch).passed


def _main(capsys, *argv: str) -> str:
    """Run the vector_dag model script with ``argv``: it fails with one [ERROR] line, its message."""
    assert vector_dag.main(list(argv)) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = [line for line in captured.err.splitlines() if line.startswith("[ERROR] ")]
    return line.removeprefix("[ERROR] ")


@pytest.mark.slow
def test_model_flags_that_would_be_ignored_are_refused(capsys):
    assert _main(capsys, "--compile-only", "--save-data") == (  # was a compile and no snapshot, silently
        "save_data (--save-data) needs a run, and compile_only (--compile-only) stops before it: drop one of them"
    )
    build = vector_dag.vector_dag.compile().work_dir
    assert _main(capsys, "--runtime-dir", str(build), "--no-check-bounds") == (  # ran the checked build
        f"compile_cfg check_bounds cannot apply to the reused build {build} (runtime_dir / --runtime-dir): it runs "
        "as it was compiled; drop these options, or compile again without runtime_dir"
    )
    assert _main(capsys, "--kernel-filter", "add") == (  # did nothing
        "kernel_filter 'add' limits print_intermediates (or a level-2 or level-3 tensor dump) to those kernels, "
        "and neither is on, so it would do nothing: add print_intermediates=N (--print-intermediates N) or "
        "enable_dump_tensor=2 (--dump-tensor 2), or drop kernel_filter"
    )
    assert vector_dag.main(["--kernel-filter", "add", "--print-intermediates", "3"]) == 0


SCENE = """
import torch

CASES = [{"name": "tolerance_as_text", "rtol": "1e-5"}]


def generate_args(case):
    return {"x": torch.ones(64, 128), "y": torch.ones(64, 128), "out": torch.zeros(64, 128)}


def compute_golden(args):
    args["out"][:] = 0
"""


@pytest.mark.slow
def test_a_scene_case_with_a_bad_tolerance_names_the_case(tmp_path):
    build = vector_dag.vector_dag.compile().work_dir
    (build / "scene_test.py").write_text(SCENE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "models")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(build), "-q", "-p", "no:cacheprovider", "--platform", "interp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (  # was a raw TypeError from inside the comparison
        f"{build / 'scene_test.py'}: case 'tolerance_as_text': rtol '1e-5': expected a finite number >= 0 "
        "(an output matches where |actual - expected| <= atol + rtol * |expected|)"
    ) in proc.stdout
    assert "TypeError" not in proc.stdout
