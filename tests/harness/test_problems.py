"""``tilescope problems``: suites in KernelBench's format (docs/problems.md) — the table's values,
the pairing rule, KernelBench's correctness rule and fast_p, every bad input's message, the JSON,
and a wrong answer's data handed to ``tilescope triage``. No assertion is on a time."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import torch

from tilescope.cli import main
from tilescope.harness.problems.pairing import Pair, find_pairs
from tilescope.harness.problems.problem_eval import Outcome, compare, tolerance
from tilescope.harness.problems.problem_table import fast_p

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problems"
SHIPPED = sorted(p for p in (PROBLEMS / "solutions").rglob("*.py") if not p.name.startswith("_"))

# A two-kernel solution of nn.Linear + ReLU whose second kernel applies sigmoid instead.
LINEAR_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 32]
'''
LINEAR_SIGMOID = '''import torch
import torch.nn as nn

import tilescope as ts

M, K, N, BM = 32, 64, 32, 16


@ts.kernel
def gemm_rows(x: ts.Tensor[[BM, K], ts.f32], w: ts.Tensor[[N, K], ts.f32], h: ts.Out[[BM, N], ts.f32]):
    ts.store(h, [0, 0], ts.matmul(ts.load(x, [0, 0], [BM, K]), ts.load(w, [0, 0], [N, K]), transpose_b=True))


@ts.kernel
def bias_act(h: ts.Tensor[[BM, N], ts.f32], bias: ts.Tensor[[1, N], ts.f32], y: ts.Out[[BM, N], ts.f32]):
    t = ts.load(h, [0, 0], [BM, N]) + ts.load(bias, [0, 0], [1, N])
    ts.store(y, [0, 0], ts.sigmoid(t))


@ts.jit
def linear_relu(x: ts.Tensor[[M, K], ts.f32], w: ts.Tensor[[N, K], ts.f32], bias: ts.Tensor[[1, N], ts.f32],
                y: ts.Out[[M, N], ts.f32]):
    h = ts.create_tensor([M, N], ts.f32)
    for r in ts.range(0, M, BM):
        gemm_rows(x[r : r + BM, :], w, h[r : r + BM, :])
    for r in ts.range(0, M, BM):
        bias_act(h[r : r + BM, :], bias, y[r : r + BM, :])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.empty(x.shape[0], self.linear.out_features)
        linear_relu(x, self.linear.weight, self.linear.bias.reshape(1, -1), y)
        return y
'''


def _suite(root: Path, problems: dict[str, tuple[str | None, str | None]]) -> Path:
    """A suite under ``root``: name -> (reference text, solution text); None leaves a file out."""
    for name, (ref, sol) in problems.items():
        for text, path in ((ref, root / f"{name}.py"), (sol, root / "solutions" / f"{name}.py")):
            if text is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    (root / "solutions").mkdir(parents=True, exist_ok=True)
    return root


def _shipped(name: str) -> tuple[str, str]:
    return (PROBLEMS / f"{name}.py").read_text(), (PROBLEMS / "solutions" / f"{name}.py").read_text()


def _rows(out: str) -> dict[str, list[str]]:
    """Each problem's row of the table, split into its cells, by name."""
    lines = out.splitlines()
    header = lines[0]
    assert header.split() == ["problem", "correct", "max", "abs", "err", "solution", "ms", "eager", "ms", "speedup"]
    return {line.split()[0]: line.split() for line in lines[1:] if line and not line.startswith(" ")
            and "correct" not in line.split()[-1] and re.match(r"\S+\s+\d+/\d+\s", line)}  # fmt: skip


def _notes(out: str, name: str) -> list[str]:
    """The lines under ``name``'s row."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
    notes = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        notes.append(line[2:])
    return notes


@pytest.mark.slow
def test_shipped_problems_give_a_table_of_their_values(capsys):
    status = main(["problems", str(PROBLEMS), "--filter", "level1/relu", "--filter", "ARGMAX", "--trials", "2",
                   "--perf-trials", "2"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    rows = _rows(out)
    assert sorted(rows) == ["level1/argmax_dim", "level1/relu"]
    for cells in rows.values():
        assert cells[1:3] == ["2/2", "0"]  # ReLU and argmax are exact
        assert float(cells[3]) > 0 and float(cells[4]) > 0 and re.fullmatch(r"\d+\.\d\dx", cells[5])
    summary = out.splitlines()[3]
    assert re.fullmatch(r"2/2 correct, fast_0 1\.000, fast_1 (0|0\.5|1)\.\d{3} \(2 problems on sim, 2 trials each, "
                        r"seed 42; times: median of 2 runs\)", summary), summary  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["sim", "interp"])
def test_every_shipped_problem_is_correct(platform, capsys):
    assert len(SHIPPED) >= 24
    status = main(["problems", str(PROBLEMS), "-p", platform, "--trials", "1", "--perf-trials", "0"])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = _rows(out)
    assert len(rows) == len(SHIPPED) and all(cells[1] == "1/1" for cells in rows.values()), out
    assert f"{len(SHIPPED)}/{len(SHIPPED)} correct ({len(SHIPPED)} problems on {platform}, 1 trials each" in out


@pytest.mark.slow
def test_a_wrong_answer_is_reported_and_saved_and_triage_names_its_kernel(tmp_path, capsys):
    suite = _suite(tmp_path / "suite", {"linear_relu": (LINEAR_RELU, LINEAR_SIGMOID)})
    status = main(["problems", str(suite), "--trials", "2", "--perf-trials", "3"])
    out = capsys.readouterr().out
    assert status == 1
    cells = _rows(out)["linear_relu"]
    assert cells[1] == "0/2" and float(cells[2]) > 0.1 and cells[3:] == ["-", "-", "-"]  # a wrong answer is not timed
    error, saved = _notes(out, "linear_relu")
    assert re.fullmatch(r"trial 1 of 2 \(seed \d+\): output: \d+ of 1024 elements outside atol=rtol=0\.0001; max abs "
                        r"error [\d.]+ at \[\d+, \d+\] \(got [-\d.e]+, expected [-\d.e]+\)", error), error  # fmt: skip
    build = Path(saved.removeprefix("data saved; find the culprit with: tilescope triage "))
    assert out.splitlines()[-1].startswith("0/1 correct, fast_0 0.000, fast_1 0.000")

    data = build / "data"
    assert sorted(p.name for p in (data / "in").iterdir()) == ["bias.pt", "w.pt", "x.pt"]
    assert json.loads((data / "meta.json").read_text())["rtol"] == 1e-4
    assert (data / "golden" / "trace.pt").is_file() and (data / "second" / "in" / "x.pt").is_file()
    # the golden is the reference model's output on the saved input, its parameters made with seed 42
    namespace: dict = {}
    exec(LINEAR_RELU, namespace)
    torch.manual_seed(42)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    with torch.no_grad():
        expected = model(torch.load(data / "in" / "x.pt"))
    assert torch.allclose(torch.load(data / "out" / "y.pt"), expected, atol=1e-6, rtol=1e-6)

    assert main(["triage", str(build), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["category"] == "algorithm"
    culprit = report["culprit"]
    line = LINEAR_SIGMOID.splitlines().index("    ts.store(y, [0, 0], ts.sigmoid(t))") + 1
    assert (culprit["kernel"], culprit["op"]) == ("bias_act", "sigmoid")
    assert culprit["dsl_line"] == f"{suite / 'solutions' / 'linear_relu.py'}:{line}"


OUT_OF_BOUNDS = '''import torch
import torch.nn as nn

import tilescope as ts

ROWS, COLS, BLOCK = 128, 1024, 16


@ts.kernel
def relu_rows(x: ts.Tensor[[BLOCK, COLS], ts.f32], y: ts.Out[[BLOCK, COLS], ts.f32], k: ts.Scalar[ts.i32]):
    t = ts.load(x, [k, 0], [BLOCK, COLS])
    ts.store(y, [0, 0], ts.relu(t))


@ts.jit
def relu(x: ts.Tensor[[ROWS, COLS], ts.f32], y: ts.Out[[ROWS, COLS], ts.f32], k: ts.Scalar[ts.i32]):
    for r in ts.range(0, ROWS, BLOCK):
        relu_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :], k)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu(x, y, 1)
        return y
'''


@pytest.mark.slow
def test_a_failed_run_saves_its_data_and_triage_runs_on_it(tmp_path, capsys):
    suite = _suite(tmp_path / "suite", {"relu": (_shipped("level1/relu")[0], OUT_OF_BOUNDS)})
    assert main(["problems", str(suite), "--trials", "1", "--triage"]) == 1
    out = capsys.readouterr().out
    notes = "\n".join(_notes(out, "relu"))
    solution = suite / "solutions" / "relu.py"
    assert f"the solution's tilescope program failed at run time (called at {solution}:24): " in notes
    assert "data saved; find the culprit with: tilescope triage " in notes
    assert "[triage] relu: out_of_bounds" in notes
    assert f"culprit: task 0, kernel relu_rows, op load at {solution}:11" in notes


BAD_SOLUTIONS = {
    "no_modelnew": "import torch.nn as nn\n\n\nclass Model(nn.Module):\n    pass\n",
    "raises": "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
              "        return x.reshape(3, -1, 7)\n",
    "syntax": "class ModelNew(nn.Module:\n    pass\n",
    "shape": "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
             "        return x[:, :10]\n",
    "dtype": "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
             "        return x.relu().double()\n",
    "import_error": "import torch.nn as nn\nfrom nowhere import thing\n",
}  # fmt: skip


@pytest.mark.slow
def test_each_bad_problem_fails_with_its_reason_and_the_others_run(tmp_path, capsys):
    ref, good = _shipped("level1/relu")
    problems = {name: (ref, text) for name, text in BAD_SOLUTIONS.items()}
    problems["good"] = (ref, good)
    problems["dsl_error"] = (ref, good.replace("ts.store(y, [0, 0], ts.relu(t))", "while t:\n        pass"))
    problems["no_model"] = (ref.replace("class Model(", "class Modle("), good)
    problems["no_inputs"] = (ref.replace("def get_inputs", "def make_inputs"), good)
    problems["no_reference"] = (None, good)
    suite = _suite(tmp_path / "suite", problems)
    sols = suite / "solutions"
    assert main(["problems", str(suite), "-p", "interp", "--trials", "2", "--perf-trials", "0"]) == 1
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["good"][1:3] == ["2/2", "0"]
    assert all(cells[1] == "0/2" for name, cells in rows.items() if name != "good")
    first = {name: _notes(out, name)[0] for name in rows if name != "good"}
    hint = "a reference REL.py defines class Model(nn.Module), get_inputs() and get_init_inputs() (KernelBench's format)"
    assert first == {
        "no_modelnew": f"{sols / 'no_modelnew.py'}: the solution defines no class ModelNew (it defines Model: name the "
                       "solution's class ModelNew); a solution defines class ModelNew(nn.Module), made with the "
                       "reference's get_init_inputs() and called with its get_inputs(), whose forward calls tilescope "
                       "programs",
        "raises": f"the solution's ModelNew.forward raised at {sols / 'raises.py'}:6: RuntimeError: shape '[3, -1, 7]' "
                  "is invalid for input of size 131072",
        "syntax": f"{sols / 'syntax.py'}:1: the solution does not parse: invalid syntax",
        "shape": f"{sols / 'shape.py'}: trial 1 of 2 (seed 734796314): output has shape [128, 10], the reference's "
                 "[128, 1024]",
        "dtype": f"{sols / 'dtype.py'}: trial 1 of 2 (seed 734796314): output has dtype torch.float64, the reference's "
                 "torch.float32: convert it on the host (out.to(torch.float32))",
        "import_error": f"{sols / 'import_error.py'}:2: importing the solution raised ModuleNotFoundError: No module "
                        "named 'nowhere'",
        "dsl_error": f"the solution's tilescope program does not compile (called at {sols / 'dsl_error.py'}:30): "
                     f"{sols / 'dsl_error.py'}:14: 'while' loops are not supported",
        "no_model": f"{suite / 'no_model.py'}: the reference defines no class Model(nn.Module); {hint}; its solution "
                    "SOLUTIONS/REL.py defines class ModelNew",
        "no_inputs": f"{suite / 'no_inputs.py'}: the reference defines no get_inputs(); {hint}; its solution "
                     "SOLUTIONS/REL.py defines class ModelNew",
        "no_reference": f"{sols / 'no_reference.py'}: no reference {suite / 'no_reference.py'} (a solution "
                        "SOLUTIONS/REL.py is paired with the reference REFS/REL.py): add it, or check the solution's "
                        "name",
    }  # fmt: skip
    assert _notes(out, "raises")[1] == "    return x.reshape(3, -1, 7)"
    assert _notes(out, "dsl_error")[1:] == ["    while t:", "  hint: use 'for i in ts.range(start, stop, step)'"]
    assert "Traceback" not in out + capsys.readouterr().err
    assert out.splitlines()[-1] == "1/11 correct (11 problems on interp, 2 trials each, seed 42; not timed: no fast_p)"


def test_a_suite_that_cannot_start_is_one_line(tmp_path, capsys):
    (tmp_path / "file.py").write_text("")
    (tmp_path / "empty" / "solutions").mkdir(parents=True)
    (tmp_path / "bare").mkdir()
    ref, sol = _shipped("level1/relu")
    suite = _suite(tmp_path / "suite", {"relu": (ref, sol)})
    fmt = ("a reference REL.py defines class Model(nn.Module), get_inputs() and get_init_inputs() (KernelBench's "
           "format); its solution SOLUTIONS/REL.py defines class ModelNew")  # fmt: skip
    cases = [
        ([str(tmp_path / "nowhere")], f"problem folder {tmp_path / 'nowhere'} does not exist; pass a folder of "
                                      f"references with their solutions ({fmt})"),
        ([str(tmp_path / "file.py")], f"problem folder {tmp_path / 'file.py'} is a file, not a folder; pass a folder "
                                      f"of references with their solutions ({fmt})"),
        ([str(tmp_path / "bare")], f"solutions folder {tmp_path / 'bare' / 'solutions'} does not exist; the solution "
                                   f"of {tmp_path / 'bare'}/REL.py is {tmp_path / 'bare' / 'solutions'}/REL.py: put your "
                                   "solutions there, or pass --solutions DIR"),
        ([str(tmp_path / "empty")], f"no problems found: {tmp_path / 'empty' / 'solutions'} holds no solution (.py "
                                    f"file); {fmt}"),
        ([str(suite), "--filter", "gelu"], "--filter 'gelu' matches none of the 1 problems (relu)"),
        ([str(suite), "--refs", str(suite)], f"pass the references once: DIR ({suite}) or --refs ({suite}), not both"),
        ([], "no problems named: pass DIR (references, solutions in DIR/solutions), or --refs DIR --solutions DIR"),
        ([str(suite), "--budget", "5"], "--budget is triage's: it needs --triage"),
        ([str(suite), "-j", "2"], "-j needs --engine local (that many problems at once, each a process of its own)"),
        ([str(suite), "--ray-shared"], "--ray-shared needs --engine ray (each problem a Ray task)"),
        ([str(suite), "--out", str(tmp_path)], "--out needs --engine local or --engine ray (each problem a process "
                                               "of its own)"),
        ([str(suite), "--engine", "ray", "-j", "2"], "-j is the local engine's number of processes: it does not "
                                                     "apply to --engine ray"),
        ([str(suite), "--engine", "local", "--ray-shared"], "--ray-shared is for --engine ray (the engine is local)"),
        ([str(suite), "--problem", "rel"], "--problem 'rel' is not one of the 1 problems (did you mean relu?): a "
                                           "problem's name is its path under the solutions without .py"),
        ([str(suite), "--engine", "local", "--out", str(tmp_path)], f"--out {tmp_path} is not empty: choose a new "
                                                                    "folder (nothing there is overwritten)"),
        (["--refs", str(suite), "--solutions", str(tmp_path / "nowhere")],
         f"solutions folder (--solutions) {tmp_path / 'nowhere'} does not exist; pass the folder that holds your "
         "ModelNew files"),
    ]  # fmt: skip
    for argv, message in cases:
        assert main(["problems", *argv]) == 1, argv
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == f"tilescope problems: error: {message}\n", argv
    with pytest.raises(SystemExit) as e:
        main(["problems", str(suite), "--trials", "0"])
    assert e.value.code == 2 and "argument --trials: '0': expected 1..1000 trials" in capsys.readouterr().err


@pytest.mark.slow
def test_json_on_standard_output_alone_or_into_a_file(tmp_path, capsys):
    ref, sol = _shipped("level1/relu")
    suite = _suite(tmp_path / "suite", {"relu": (ref, sol), "wrong": (ref, sol.replace("ts.relu(t)", "t"))})
    assert main(["problems", str(suite), "-p", "interp", "--trials", "2", "--perf-trials", "1", "--json"]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing else on stdout
    assert _rows(captured.err)["relu"][1] == "2/2"  # the table went to stderr
    assert {k: data[k] for k in ("format", "version", "platform", "trials", "perf_trials", "seed")} == {
        "format": "tilescope-problems", "version": 1, "platform": "interp", "trials": 2, "perf_trials": 1, "seed": 42}
    relu, wrong = data["problems"]
    assert set(relu) == {"name", "reference", "solution", "correct", "trials_correct", "trials", "max_abs_error", "atol",
                         "rtol", "solution_ms", "eager_ms", "speedup", "error", "build", "triage_command", "note",
                         "triage"}  # fmt: skip
    assert (relu["name"], relu["correct"], relu["trials_correct"], relu["max_abs_error"], relu["atol"]) == (
        "relu", True, 2, 0.0, 1e-4)
    assert relu["speedup"] == pytest.approx(relu["eager_ms"] / relu["solution_ms"])
    assert relu["error"] is None and relu["build"] is None
    assert (wrong["correct"], wrong["trials_correct"], wrong["solution_ms"], wrong["speedup"]) == (False, 0, None, None)
    assert wrong["max_abs_error"] > 1 and wrong["error"].startswith("trial 1 of 2 (seed 734796314): output: ")
    assert wrong["triage_command"] == f"tilescope triage {wrong['build']}" and Path(wrong["build"], "data").is_dir()
    assert data["summary"]["total"] == 2 and data["summary"]["correct"] == 1 and data["summary"]["unsolved"] == 0
    assert data["summary"]["fast_0"] == 0.5 and data["summary"]["fast_1"] in (0.0, 0.5)

    path = tmp_path / "out" / "results.json"
    assert main(["problems", str(suite), "-p", "interp", "--trials", "1", "--perf-trials", "0", "--filter", "relu",
                 "--json", str(path)]) == 0  # fmt: skip
    assert _rows(capsys.readouterr().out)["relu"][1] == "1/1"
    saved = json.loads(path.read_text())
    assert [p["name"] for p in saved["problems"]] == ["relu"]
    assert saved["summary"]["fast_0"] is None  # not timed


HOST_CONVERTED = """
import torch
import torch.nn as nn

import tilescope as ts


@ts.kernel
def rows(x: ts.Tensor[[16, 1024], ts.f32], y: ts.Out[[16, 1], ts.DTYPE]):
    ts.store(y, [0, 0], ts.OP(ts.load(x, [0, 0], [16, 1024])))


@ts.jit
def prog(x: ts.Tensor[[128, 1024], ts.f32], y: ts.Out[[128, 1], ts.DTYPE]):
    for r in ts.range(0, 128, 16):
        rows(x[r : r + 16, :], y[r : r + 16, :])


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()

    def forward(self, x):
        y = torch.empty(x.shape[0], 1, dtype=torch.TORCH)
        prog(x, y)
        return HOST
"""


@pytest.mark.slow
def test_the_golden_of_an_output_converted_or_viewed_on_the_host(tmp_path, capsys):
    """argmax's i32 output widened to int64 (a copy) and mean's [R, 1] output reshaped (a view): the
    saved golden is the reference's output as the program's parameter holds it."""
    argmax_ref, _ = _shipped("level1/argmax_dim")
    mean_ref, _ = _shipped("level1/mean_dim")

    def solution(dtype: str, op: str, torch_dtype: str, host: str) -> str:
        text = HOST_CONVERTED.replace("DTYPE", dtype).replace("OP", op).replace("TORCH", torch_dtype)
        return text.replace("HOST", host)

    suite = _suite(tmp_path / "suite", {
        "argmax": (argmax_ref, solution("i32", "row_argmin", "int32", "y.reshape(-1).to(torch.int64)")),
        "mean": (mean_ref, solution("f32", "row_max", "float32", "y.reshape(-1)")),
    })  # fmt: skip
    assert main(["problems", str(suite), "-p", "interp", "--trials", "2", "--perf-trials", "0"]) == 1
    out = capsys.readouterr().out
    for name, golden in (("argmax", lambda x: x.argmax(1, keepdim=True).to(torch.int32)),
                         ("mean", lambda x: x.mean(1, keepdim=True))):  # fmt: skip
        build = Path(_notes(out, name)[1].removeprefix("data saved; find the culprit with: tilescope triage "))
        x = torch.load(build / "data" / "in" / "x.pt")
        saved = torch.load(build / "data" / "out" / "y.pt")
        assert saved.dtype == golden(x).dtype and saved.shape == (128, 1)
        assert torch.allclose(saved, golden(x), atol=1e-6, rtol=0), name


@pytest.mark.slow
def test_kernelbench_layout_with_references_and_solutions_apart(tmp_path, capsys):
    ref, sol = _shipped("level1/relu")
    refs, sols = tmp_path / "KernelBench" / "KernelBench", tmp_path / "mine"
    (refs / "level1").mkdir(parents=True)
    (sols / "level1" / "__pycache__").mkdir(parents=True)
    (refs / "level1" / "19_ReLU.py").write_text(ref)
    (refs / "level1" / "20_LeakyReLU.py").write_text(_shipped("level1/leaky_relu")[0])
    (sols / "level1" / "19_ReLU.py").write_text(sol)
    (sols / "level1" / "_helpers.py").write_text("raise RuntimeError('not a problem')\n")
    assert main(["problems", "--refs", str(refs), "--solutions", str(sols), "-p", "interp", "--trials", "1",
                 "--perf-trials", "0"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert _rows(out)["level1/19_ReLU"][1:3] == ["1/1", "0"]
    assert out.splitlines()[-1] == f"1 reference(s) under {refs} have no solution under {sols}: not run"


def test_pairs_follow_the_relative_path(tmp_path):
    for rel in ("a.py", "level1/b.py", "level1/c.py", "_common.py", "solutions/a.py", "solutions/level1/b.py",
                "solutions/level1/_helper.py", "solutions/orphan.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    suite = find_pairs(tmp_path)
    assert [(p.name, p.reference, p.solution) for p in suite.pairs] == [
        ("a", tmp_path / "a.py", tmp_path / "solutions" / "a.py"),
        ("level1/b", tmp_path / "level1" / "b.py", tmp_path / "solutions" / "level1" / "b.py"),
        ("orphan", None, tmp_path / "solutions" / "orphan.py"),
    ]
    assert suite.unsolved == 1  # level1/c.py; the solutions folder's own files are no references
    assert [p.name for p in find_pairs(tmp_path, filters=["LEVEL1", "orph"]).pairs] == ["level1/b", "orphan"]


def test_kernelbench_tolerances_and_mismatches():
    assert (tolerance(torch.float32), tolerance(torch.float16), tolerance(torch.bfloat16)) == (1e-4, 1e-2, 1e-2)
    ref = torch.tensor([1.0, 2.0, 3.0])
    assert compare(ref, ref + 1e-5, "output") == (None, pytest.approx(1e-5, rel=1e-2), False)
    reason, err, fatal = compare(ref, torch.tensor([1.0, 2.5, 3.0]), "output")
    assert reason == "output: 1 of 3 elements outside atol=rtol=0.0001; max abs error 0.5 at [1] (got 2.5, expected 2)"
    assert err == 0.5 and not fatal
    half = ref.to(torch.bfloat16)
    assert compare(half, half * 1.005, "output")[0] is None  # within bf16's 1e-2
    assert compare(ref, ref.double(), "output")[2] and compare(ref, ref[:2], "output")[2]
    reason, err, _ = compare(ref, torch.tensor([1.0, float("nan"), 3.0]), "output")
    assert reason.startswith("output: 1 of 3 elements outside") and "at [1] (got nan" in reason and err != err


def test_fast_p_is_kernelbenchs():
    def outcome(passed: int, solution_ms: float | None, eager_ms: float | None) -> Outcome:
        o = Outcome(Pair("p", None, Path("p.py"), Path("p.py")), trials=2, passed=passed)
        o.solution_ms, o.eager_ms = solution_ms, eager_ms
        return o

    outcomes = [outcome(2, 1.0, 3.0), outcome(2, 2.0, 1.0), outcome(1, None, None), outcome(2, 1.0, 1.0)]
    assert fast_p(outcomes, 0.0) == 0.75  # every correct problem
    assert fast_p(outcomes, 1.0) == 0.25  # correct and faster than eager (speedup > 1)
    assert fast_p(outcomes, 2.0) == 0.25 and fast_p(outcomes, 3.0) == 0.0
    assert fast_p([], 0.0) == 0.0


# A solution whose process dies at import: its row says so, with the end of its output.
DIES = "import os\nimport sys\n\nprint('loading the weights', flush=True)\nsys.stdout.flush()\nos._exit(3)\n"
HANGS = ("import time\n\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
         "        time.sleep(3600)\n")  # fmt: skip


def _engine_suite(tmp_path: Path) -> Path:
    ref, good = _shipped("level1/relu")
    return _suite(tmp_path / "suite", {"relu": (ref, good), "linear_relu": (LINEAR_RELU, LINEAR_SIGMOID),
                                       "dies": (ref, DIES)})  # fmt: skip


def _check_engine_run(suite: Path, out: Path, text: str, data: dict) -> None:
    """What an engine run of ``_engine_suite`` gives, whichever engine ran it."""
    rows = _rows(text)
    assert rows["relu"][1:3] == ["2/2", "0"] and rows["linear_relu"][1] == "0/2" and rows["dies"][1] == "0/2"
    dies = "\n".join(_notes(text, "dies"))
    assert dies.startswith("its process gave no result (exit status 3); its output (") and "loading the weights" in dies
    assert [p["name"] for p in data["problems"]] == ["dies", "linear_relu", "relu"]  # the suite's order
    assert data["summary"]["correct"] == 1 and data["summary"]["total"] == 3
    wrong = data["problems"][1]
    build = Path(wrong["build"])
    assert build.is_relative_to(out / "cases") and (build / "data" / "in" / "x.pt").is_file()
    assert wrong["triage_command"] == f"tilescope triage {build}"
    culprit = wrong["triage"]["culprit"]
    line = LINEAR_SIGMOID.splitlines().index("    ts.store(y, [0, 0], ts.sigmoid(t))") + 1
    assert (wrong["triage"]["category"], culprit["kernel"], culprit["op"]) == ("algorithm", "bias_act", "sigmoid")
    assert culprit["dsl_line"] == f"{suite / 'solutions' / 'linear_relu.py'}:{line}"
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["summary"] == {"pass": 1, "fail": 1, "error": 1, "pending": 0}
    assert sweep["command"][1:5] == ["-m", "tilescope", "problems", str(suite)]
    failed = next(c for c in sweep["cases"] if c["values"] == {"problem": "linear_relu"})
    assert (failed["triage"]["kernel"], failed["triage"]["op"]) == ("bias_act", "sigmoid")
    assert (out / failed["triage"]["report"]).is_file() and "linear_relu" in (out / "sweep.html").read_text()


@pytest.mark.slow
def test_each_problem_a_process_of_the_local_engine(tmp_path, capsys):
    suite, out = _engine_suite(tmp_path), tmp_path / "cases"
    status = main(["problems", str(suite), "--engine", "local", "-j", "2", "--out", str(out), "--trials", "2",
                   "--perf-trials", "1", "--triage", "--json", str(tmp_path / "r.json")])  # fmt: skip
    text = capsys.readouterr().out
    assert status == 1
    _check_engine_run(suite, out, text, json.loads((tmp_path / "r.json").read_text()))
    assert text.splitlines()[-1] == f"(each problem's output and builds: {out}; the table: {out / 'sweep.html'})"
    # the saved data came back where triage finds it
    wrong = json.loads((tmp_path / "r.json").read_text())["problems"][1]
    assert main(["triage", wrong["build"], "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["culprit"]["op"] == "sigmoid"


@pytest.mark.slow
def test_a_problem_past_the_timeout_is_killed_and_reported(tmp_path, capsys):
    ref, good = _shipped("level1/relu")
    suite = _suite(tmp_path / "suite", {"hangs": (ref, HANGS)})
    out = tmp_path / "cases"
    assert main(["problems", str(suite), "--engine", "local", "--timeout", "5", "--out", str(out), "--trials",
                 "1", "--perf-trials", "0"]) == 1  # fmt: skip
    text = capsys.readouterr().out
    assert _rows(text)["hangs"][1] == "0/1"
    assert _notes(text, "hangs")[0].startswith("its process ran past --timeout and was killed; its output (")
    assert json.loads((out / "sweep.json").read_text())["cases"][0]["status"] == "timeout"


@pytest.mark.slow
@pytest.mark.serial  # one local Ray on the machine at a time
def test_each_problem_a_ray_task_its_failures_files_brought_back(tmp_path, capsys):
    suite, out = _engine_suite(tmp_path), tmp_path / "cases"
    status = main(["problems", str(suite), "--engine", "ray", "--out", str(out), "--trials", "2", "--perf-trials",
                   "1", "--triage", "--json", str(tmp_path / "r.json")])  # fmt: skip
    assert status == 1
    _check_engine_run(suite, out, capsys.readouterr().out, json.loads((tmp_path / "r.json").read_text()))
    assert json.loads((out / "sweep.json").read_text())["engine"] == "ray"


def test_a_problems_process_gets_the_knobs_this_environment_sets_as_flags(tmp_path, monkeypatch):
    from tilescope.harness.flags import effective_knobs
    from tilescope.harness.problems.problem_cases import default_out, problem_argv

    monkeypatch.setenv("TILESCOPE_PLATFORM", "interp")  # a Ray worker of a cluster does not have it
    monkeypatch.setenv("TILESCOPE_KERNEL_FILTER", "a,b")
    suite = find_pairs(_suite(tmp_path / "suite", {"relu": _shipped("level1/relu")}))
    args = argparse.Namespace(trials=2, perf_trials=0, seed=7, triage=True, budget=5.0)
    argv = problem_argv(args, suite, suite.pairs[0], effective_knobs({"num_workers": 3}, {"check_bounds": False}))
    assert argv[:2] == ["sh", "-c"] and 'unset TILESCOPE_SWEEP_RESULT; exec "$0" "$@" --json "$r"' in argv[2]
    rest = argv[3:]
    assert "--problem=relu" in rest and rest[rest.index("--platform") + 1] == "interp"
    assert rest[rest.index("--workers") + 1] == "3" and "--no-check-bounds" in rest and "--triage" in rest
    assert rest[rest.index("--kernel-filter") + 1] == "a,b" and rest[rest.index("--budget") + 1] == "5.0"
    # two runs started in the same second each get a folder of their own
    first, second = default_out(tmp_path / "b"), default_out(tmp_path / "b")
    assert first != second and first.is_dir() and second.is_dir()
