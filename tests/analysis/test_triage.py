"""`tilescope triage`: one command from a failure to its category and culprit, on real programs
with one planted fault each; every triage with a budget no machine runs out of (conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import triage_programs as tp
from helpers import line_of

import tilescope as ts
from tilescope.analysis.data import save_snapshot
from tilescope.analysis.triage.triage_command import CATEGORIES, triage

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run


def with_data(prog, inputs: dict, golden: dict, rtol=1e-5, atol=1e-5):
    """``prog``'s build with ``inputs`` and ``golden`` saved as its data (what --save-data writes)."""
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, golden, {"rtol": rtol, "atol": atol})
    return prog.work_dir


def triaged(work, **options) -> dict:
    """Triage ``work`` (with a budget no machine runs out of); the JSON report it wrote, checked to
    be the one it returned."""
    rep = triage(work, **options)
    data = json.loads((work / "dfx_outputs" / "triage" / "report.json").read_text())
    assert data["format"] == "tilescope-localize" and data["tool"] == "triage" and data["category"] in CATEGORIES
    assert data["category"] == rep.category and data["culprit"] == vars(rep.culprit)
    assert "budget" not in " ".join(data["limitations"]), data["limitations"]
    return data


def test_a_correct_program_passes_and_is_deterministic(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    work = with_data(prog, inputs, {"y": inputs["x"] * 2, "z": tp.pipeline_golden(inputs["x"])})
    y = torch.zeros(5 * tp.B, tp.C)
    y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    work = prog.work_dir
    (work / "data" / "out" / "y.pt").unlink()
    torch.save(y, work / "data" / "out" / "y.pt")
    data = triaged(work)
    assert data["category"] == "pass" and data["deterministic"] is True
    assert any(s["step"].endswith("shuffled runs") for s in data["steps"])
    assert "the same bit for bit across" in data["summary"]


def test_a_load_past_its_region_into_an_unordered_neighbour_is_a_race_in_that_kernel(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    golden_y = torch.zeros(5 * tp.B, tp.C)
    golden_y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    work = with_data(prog, inputs, {"y": golden_y, "z": tp.pipeline_golden(inputs["x"])})
    source = tp.edit_kernel(prog, "consume", "view<64, 64>(y, {0, 0}", "view<64, 64>(y, {32, 0}")
    data = triaged(work)
    assert data["category"] == "race"
    c = data["culprit"]
    assert (c["task"], c["kernel"], c["op"]) == (4, "consume", "load")
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.consume, 't = ts.load(y')}")
    assert c["cpp_line"].startswith(source + ":")
    assert any("outside its declared in y[0:64, 0:64]" in e for e in data["evidence"])
    assert any("are not ordered by any path of dependencies" in e for e in data["evidence"])


def test_a_store_loop_one_chunk_short_is_uninitialized_in_that_kernel_with_the_region(tmp_path):
    prog = tp.short_store.compile(build_dir=str(tmp_path))
    inputs = tp.short_store_inputs()
    work = with_data(prog, inputs, {"z": tp.short_store_golden(inputs["x"])})
    data = triaged(work)
    assert data["category"] == "uninitialized"
    c = data["culprit"]
    # the loop that stops a chunk short, confirmed by running it one step longer
    assert (c["task"], c["kernel"], c["op"]) == (0, "scale_rows_short", "range")
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.scale_rows_short, 'for h in ts.range(0, W - 64')}")
    assert "y[:, 448:512] is never written" in data["summary"]
    assert any("with the loop over h of kernel scale_rows_short" in e and "one step longer" in e
               for e in data["evidence"])


def test_split_kv_attention_missing_a_store_blames_the_partial_kernel(tmp_path):
    prog = tp.split_kv_missing_store.compile(build_dir=str(tmp_path))
    inputs = tp.attention_inputs()
    work = with_data(prog, inputs, {"out": tp.attention_golden(inputs["q"], inputs["k"], inputs["v"])}, 1e-4, 1e-4)
    data = triaged(work)
    assert data["category"] == "uninitialized"
    assert (data["culprit"]["kernel"], data["culprit"]["task"]) == ("attn_partial_no_l", 0)
    assert "rowsum" in data["summary"]


def test_an_orchestration_edited_to_add_an_output_for_an_inout_is_a_signature_mismatch(tmp_path):
    prog = tp.running_sum.compile(build_dir=str(tmp_path))
    inputs = tp.running_sum_inputs()
    work = with_data(prog, inputs, {"acc": tp.running_sum_golden(inputs["x"], inputs["acc"])})
    src = work / "orchestration" / "running_sum.cpp"
    text = src.read_text()
    assert "task.add_inout(acc" in text
    src.write_text(text.replace("task.add_inout(acc", "task.add_output(acc"))
    data = triaged(work)
    assert data["category"] == "signature"
    line = next(i for i, t in enumerate(src.read_text().splitlines(), 1) if "orch.task(FUNC_ACCUMULATE" in t)
    c = data["culprit"]
    assert c["cpp_line"] == f"orchestration/running_sum.cpp:{line}"
    assert c["kernel"] == "accumulate" and c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.running_sum, 'accumulate(')}"), c
    assert "a accumulate task is given (D.IN, D.OUT)" in data["summary"]


def test_a_crashing_kernel_is_a_crash_named_by_task_kernel_and_line(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    work = with_data(prog, inputs, {"y": inputs["x"] * 0, "z": tp.pipeline_golden(inputs["x"])})
    source = tp.edit_kernel(prog, "consume", "store(z, {0, 0}", "*(volatile float *)nullptr = 1.0f; store(z, {0, 0}")
    data = triaged(work)
    assert data["category"] == "crash"
    c = data["culprit"]
    assert c["kernel"] == "consume" and c["task"] in range(4, 8)
    assert c["cpp_line"].startswith(source + ":") and c["dsl_line"].endswith(
        f"triage_programs.py:{line_of(tp.consume, 'ts.store(z')}"
    )
    assert any("SIGSEGV" in e for e in data["evidence"]) or "SIGSEGV" in data["summary"]


@ts.kernel
def spin(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    acc = ts.load(x, [0, 0], [8, 16])
    for _ in ts.range(0, 1000000000000):
        acc = acc * 1.0000001
    ts.store(y, [0, 0], acc)


@ts.jit
def spinner(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    spin(x, y)


def test_a_spinning_kernel_is_a_hang_at_its_loop(tmp_path):
    prog = spinner.compile(build_dir=str(tmp_path))
    x = torch.randn(8, 16)
    work = with_data(prog, {"x": x, "y": torch.zeros(8, 16)}, {"y": x})
    data = triaged(work, task_timeout_s=3)
    assert data["category"] == "hang"
    c = data["culprit"]
    assert (c["task"], c["kernel"]) == (0, "spin")
    assert c["dsl_line"].rsplit(":", 1)[1] in {
        str(line_of(spin, "for _ in ts.range")), str(line_of(spin, "acc = acc * 1.0000001"))
    }


def test_a_missing_producer_is_a_deadlock(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    work = with_data(prog, inputs, {"y": inputs["x"] * 0, "z": tp.pipeline_golden(inputs["x"])})
    src = work / "orchestration" / "pipeline.cpp"
    text = src.read_text()
    line = line_of(tp.pipeline, "consume(y[r")
    old = f'orch.task(FUNC_CONSUME, "consume", "triage_programs.py:{line}");'
    assert old in text
    src.write_text(text.replace(old, old + " task.depends_on(99);", 1))
    data = triaged(work)
    assert data["category"] == "deadlock"
    assert "waits for task 99, which was never submitted" in " ".join(data["evidence"])


def test_a_nan_producer_names_its_task_and_op(tmp_path):
    prog = tp.log_rows.compile(build_dir=str(tmp_path))
    inputs = tp.log_rows_inputs()
    work = with_data(prog, inputs, {"y": torch.log(inputs["x"] * 2 + 1) + 1})  # what the kernel meant
    data = triaged(work)
    assert data["category"] == "nan"
    c = data["culprit"]
    assert (c["task"], c["kernel"], c["op"]) == (1, "log_shift", "log")
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.log_shift, 'v = ts.log')}")


def test_a_wrong_shape_input_is_bad_input_naming_the_argument(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    inputs["x"] = torch.randn(3 * tp.B, tp.C)  # the program takes 5 blocks
    work = with_data(prog, inputs, {"y": torch.zeros(5 * tp.B, tp.C), "z": torch.zeros(4 * tp.B, tp.C)})
    data = triaged(work)
    assert data["category"] == "bad_input"
    assert "x" in data["summary"] and "[192, 64]" in data["summary"]


@ts.kernel
def churn(x: ts.Tensor[[1, 16], ts.f32], y: ts.Out[[1, 16], ts.f32], n: ts.Scalar[ts.i64]):
    acc = ts.load(x, [0, 0], [1, 16])
    for _ in ts.range(0, n):
        acc = acc + 1.0 - 1.0  # exact for small integers
    ts.store(y, [0, 0], acc * 2.0)


@ts.jit
def churner(x: ts.Tensor[[1, 16], ts.f32], y: ts.Out[[1, 16], ts.f32], n: ts.Scalar[ts.i64]):
    churn(x, y, n)


# The child: pins itself to one CPU, sizes churn's one task there (unloaded) at task_cpu_s of CPU,
# saves its data, starts the hogs on that CPU, triages, then times the task under the same load.
HOGGED = """
import json, os, subprocess, sys, time
cpu = max(os.sched_getaffinity(0))
os.sched_setaffinity(0, {{cpu}})  # first: every worker thread the run starts inherits it
import pytest
import torch
import tilescope as ts
from tilescope.analysis.data import save_snapshot
from tilescope.analysis.triage.triage_command import CATEGORIES, triage

prog = ts.CompiledProgram({work!r})
x = torch.randint(-100, 100, (1, 16)).float()
n0 = 20_000_000
walls = []
for _ in range(3):  # the fastest of three: a moment of load elsewhere does not shrink the task
    t = prog.run(x, torch.zeros(1, 16), n0, enable_trace=True, num_workers=1).report.tasks[0]
    walls.append((t.end_ns - t.start_ns) / 1e9)
n = max(1, int({task_cpu_s} / (min(walls) / n0)))
save_snapshot(prog.work_dir / "data", list(prog.args), {{"x": x, "y": torch.zeros(1, 16), "n": n}}, {{"y": x * 2}},
              {{"rtol": 0.0, "atol": 0.0}})
hog = "import os\\nwhile os.getppid() == %d: pass" % os.getpid()
hogs = [subprocess.Popen([sys.executable, "-S", "-c", hog]) for _ in range({hogs})]
try:
    time.sleep(0.3)
    rep = triage(prog.work_dir, task_timeout_s={task_timeout_s})
    first = next(s for s in rep.steps if s.step.startswith("run isolated"))
    loaded = prog.run(x, torch.zeros(1, 16), n, enable_trace=True, num_workers=1, task_timeout_s=0)
    t = loaded.report.tasks[0]
    print(json.dumps({{"category": rep.category, "summary": rep.summary, "task_timeout_s": first.task_timeout_s,
                      "loaded_wall_s": (t.end_ns - t.start_ns) / 1e9, "elapsed_s": rep.elapsed_s}}))
finally:
    for h in hogs:
        h.kill()
"""


@pytest.mark.serial
def test_a_correct_program_on_a_cpu_loaded_by_a_hog_is_not_a_false_hang(tmp_path):
    from tilescope.runtime import library

    library.load_core()  # built here, once, not in the loaded child
    prog = churner.compile(build_dir=str(tmp_path))
    script = HOGGED.format(work=str(prog.work_dir), task_cpu_s=1.0, hogs=5, task_timeout_s=2)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["category"] == "pass", got
    # the load was real: under it the task takes longer in wall time than the budget triage gave it
    assert got["loaded_wall_s"] > got["task_timeout_s"] == 2, got


def test_the_command_prints_json_and_exits_by_verdict(tmp_path):
    prog = tp.short_store.compile(build_dir=str(tmp_path))
    inputs = tp.short_store_inputs()
    work = with_data(prog, inputs, {"z": tp.short_store_golden(inputs["x"])})
    out = subprocess.run([sys.executable, "-m", "tilescope", "triage", str(work), "--json"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["category"] == "uninitialized" and data["culprit"]["kernel"] == "scale_rows_short"
    assert out.stderr == ""  # no progress lines off a terminal, no stray logs


def test_the_command_refuses_what_it_cannot_use(tmp_path, monkeypatch):
    prog = tp.short_store.compile(build_dir=str(tmp_path))

    def run(*argv, env=None):
        return subprocess.run([sys.executable, "-m", "tilescope", "triage", *argv], capture_output=True, text=True,
                              env=env)  # fmt: skip

    no_data = run(str(prog.work_dir))
    assert no_data.returncode == 1 and "has no saved data" in no_data.stderr and "--save-data" in no_data.stderr
    assert run(str(tmp_path / "nope")).returncode == 1
    bad = run(str(prog.work_dir), "--budget", "0")
    assert bad.returncode == 2 and "expected a number of seconds > 0" in bad.stderr
    no_timeout = run(str(prog.work_dir), "--task-timeout", "0")
    assert no_timeout.returncode == 2 and "--task-timeout" in no_timeout.stderr
    with pytest.raises(ts.TilescopeError, match="budget=-1: expected a number of seconds > 0"):
        ts.triage(prog.work_dir, budget=-1)
    with pytest.raises(ts.TilescopeError, match="task_timeout_s=inf: expected a number of seconds > 0"):
        ts.triage(prog.work_dir, task_timeout_s=float("inf"))
    inputs = tp.short_store_inputs()
    with_data(prog, inputs, {"z": tp.short_store_golden(inputs["x"])})
    soon = run(str(prog.work_dir), env={**os.environ, "TILESCOPE_TRIAGE_BUDGET": "soon"})
    assert soon.returncode == 1, soon.stderr
    assert "TILESCOPE_TRIAGE_BUDGET='soon' (triage_budget): expected a number of seconds > 0" in soon.stderr
    assert "Traceback" not in soon.stderr
    assert not (prog.work_dir / "dfx_outputs" / "triage" / "report.json").exists()


def test_a_kernel_that_copies_never_written_memory_is_not_blamed_for_it(tmp_path):
    prog = tp.half_then_copy.compile(build_dir=str(tmp_path))
    x = torch.randn(tp.B, 2 * tp.C)
    work = with_data(prog, {"x": x, "z": torch.zeros(tp.B, 2 * tp.C)}, {"z": x * 3})
    data = triaged(work)
    assert data["category"] == "uninitialized"
    assert (data["culprit"]["task"], data["culprit"]["kernel"]) == (0, "half_store")
    assert any("task 1 (kernel copy_block) read" in e for e in data["evidence"])


def test_an_explicit_inf_mask_the_golden_has_too_passes(tmp_path):
    prog = tp.masked.compile(build_dir=str(tmp_path))
    x = torch.randn(tp.B, tp.C)
    work = with_data(prog, {"x": x, "y": torch.zeros(tp.B, tp.C)}, {"y": torch.where(x > 0, x, float("-inf"))})
    data = triaged(work)
    assert data["category"] == "pass" and data["deterministic"] is True
    assert any("the golden has the same values there" in e for e in data["evidence"])


def test_never_written_memory_that_is_not_what_is_wrong_does_not_decide(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    golden_y = torch.zeros(5 * tp.B, tp.C)
    golden_y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    # y's last block is never written by design; the golden of z is wrong (an algorithm question)
    work = with_data(prog, inputs, {"y": golden_y, "z": tp.pipeline_golden(inputs["x"]) + 0.5})
    data = triaged(work)
    assert data["category"] == "algorithm", data["summary"]
    assert any(e.startswith("poison runs: the outputs that depend on memory nothing wrote are not the wrong ones")
               for e in data["evidence"])


def test_a_read_far_past_a_tensor_faults_in_its_guard_pages_and_is_named_out_of_bounds(tmp_path):
    # the isolated run maps each argument alone inside inaccessible address space: the kernel's read
    # 236 rows past x faults there, and the crash report names x as the tensor it went outside
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    golden_y = torch.zeros(5 * tp.B, tp.C)
    golden_y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    work = with_data(prog, inputs, {"y": golden_y, "z": tp.pipeline_golden(inputs["x"])})
    tp.edit_kernel(prog, "produce", "view<64, 64>(x, {0, 0}", "view<64, 64>(x, {300, 0}")
    data = triaged(work)
    assert data["category"] == "out_of_bounds", data["summary"]
    assert data["summary"] == "a kernel read or wrote outside x: it faulted in the guard pages around it"
    c = data["culprit"]
    assert (c["task"], c["kernel"]) == (0, "produce")
    assert c["cpp_line"].startswith("kernels/vec/produce.cpp:")
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.produce, 'ts.store(y')}")
    assert any("past the end of x (arg 0), in the guard pages around it" in e for e in data["evidence"]), data["evidence"]


@pytest.mark.parametrize(
    ("starts", "n", "op", "text", "message"),
    [
        ([0, tp.B, 2 * tp.B, 3 * tp.B + 8], 4, "call", "produce(x[s : s + B, :]",
         "task 3 'produce' (func_id 0), arg 0 (input): slice [200:264, 0:64]"),
        ([0, tp.B, 2 * tp.B, 3 * tp.B], 5, "read", "s = meta[b + 1]",
         "orchestration reads meta[5] at triage_programs.py:{line}, outside the tensor's shape [5]"),
    ],
    ids=["slice", "read"],
)
def test_an_orchestration_region_or_read_out_of_range_names_its_line(tmp_path, starts, n, op, text, message):
    prog = tp.gathered.compile(build_dir=str(tmp_path))
    inputs = tp.gathered_inputs(starts, n)
    work = with_data(prog, inputs, {"y": inputs["x"] * 2})
    data = triaged(work)
    line = line_of(tp.gathered, text)
    assert data["category"] == "out_of_bounds", data["summary"]
    c = data["culprit"]
    assert (c["op"], c["dsl_line"]) == (op, f"triage_programs.py:{line}"), c
    assert c["kernel"] == ("produce" if op == "call" else None), c
    assert any(e.startswith(message.format(line=line)) for e in data["evidence"]), data["evidence"]


def test_a_region_every_task_of_a_call_overwrites_names_the_call(tmp_path):
    prog = tp.same_block.compile(build_dir=str(tmp_path))
    x = torch.randn(4 * tp.B, tp.C)
    inputs = {"x": x, "y": torch.zeros(4 * tp.B, tp.C), "z": torch.zeros(4 * tp.B, tp.C)}
    work = with_data(prog, inputs, {"y": x * 2, "z": x * 2 + 1})
    data = triaged(work)
    assert data["category"] == "uninitialized", data["summary"]
    c = data["culprit"]
    assert (c["task"], c["kernel"], c["op"]) == (4, "consume", "call"), c
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.same_block, 'z[0:B, :]')}"), c
    assert "tasks 4, 5, 6, 7 (kernel consume) all write z[0:64, 0:64], each write lost to the next before anything " \
           "reads it: only task 7's survives" in data["evidence"]


def test_a_read_of_padding_nothing_wrote_names_the_load_that_reads_it(tmp_path):
    prog = tp.padded.compile(build_dir=str(tmp_path))
    x = torch.randn(2 * tp.B, tp.C)
    work = with_data(prog, {"x": x, "y": torch.zeros(2 * tp.B, 1)}, {"y": (x - 5.0).amax(1, keepdim=True)})
    data = triaged(work)
    assert data["category"] == "uninitialized", data["summary"]
    c = data["culprit"]
    assert (c["task"], c["kernel"], c["op"]) == (1, "padded_max", "load"), c
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.padded_max, 't = ts.load(h')}"), c
    assert any(e.startswith(f"with the {tp.B * 8} element(s) of h nothing wrote read as NaN, task 1's first statement")
               for e in data["evidence"]), data["evidence"]  # fmt: skip


def test_a_scalar_data_file_holding_several_values_is_bad_input(tmp_path):
    prog = churner.compile(build_dir=str(tmp_path))
    x = torch.randn(1, 16)
    work = with_data(prog, {"x": x, "y": torch.zeros(1, 16), "n": 3}, {"y": x * 2})
    torch.save(torch.zeros(3), work / "data" / "in" / "n.pt")
    data = triaged(work)
    assert data["category"] == "bad_input" and "n.pt: shape [3], expected []" in data["summary"]




@ts.kernel
def log_scaled(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    t = ts.load(x, [0, 0], [8, 16])
    ts.store(y, [0, 0], ts.log(t - 1.0) * 2.0)  # the bug (meant t + 1.0): the log makes NaN, the mul carries it


@ts.jit
def log_scaled_rows(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.f32]):
    for r in ts.range(0, 16, 8):
        log_scaled(x[r : r + 8, :], y[r : r + 8, :])


def test_a_nan_made_inside_a_statement_names_the_op_that_made_it_not_the_outermost(tmp_path):
    prog = log_scaled_rows.compile(build_dir=str(tmp_path))
    x = torch.rand(16, 16) + 0.5
    work = with_data(prog, {"x": x, "y": torch.zeros(16, 16)}, {"y": torch.log(x + 1.0) * 2.0})
    data = triaged(work)
    c = data["culprit"]
    assert (data["category"], c["kernel"], c["op"]) == ("nan", "log_scaled", "log")
    assert c["dsl_line"].endswith(f":{line_of(log_scaled, 'ts.log(t - 1.0) * 2.0')}")


def test_a_build_file_triage_needs_that_is_gone_is_named_not_the_budget(tmp_path):
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    golden_y = torch.zeros(5 * tp.B, tp.C)
    golden_y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    work = with_data(prog, inputs, {"y": golden_y, "z": tp.pipeline_golden(inputs["x"]) + 0.5})
    report = work / "report" / "report.json"
    report.unlink()
    data = triaged(work, fix=True)
    assert data["category"] == "algorithm"
    fix = data["fix"]
    # --fix names the file it needs, and tries nothing in its place
    assert fix["why_none"].startswith(f"{report} is missing: the build is incomplete"), fix
    assert fix["why_none"].endswith("compile the program again") and fix["tried"] == []
    assert any(x.startswith(f"{report} is missing") for x in data["limitations"])
    ir = work / "ir" / "pipeline.py"
    ir.unlink()
    with pytest.raises(ts.TilescopeError) as e:
        triage(work)
    said = str(e.value)
    assert f"{ir} is missing: the build is incomplete" in said and "compile the program again" in said
    assert "budget" not in said
    out = subprocess.run([sys.executable, "-m", "tilescope", "triage", str(work)], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.startswith(f"[ERROR] cannot triage {work}: {ir} is missing"), out.stderr


@ts.kernel
def softmax_rows(x: ts.Tensor[[8, 32], ts.f32], y: ts.Out[[8, 32], ts.f32]):
    t = ts.load(x, [0, 0], [8, 32])
    e = ts.exp(t - ts.row_max(t))
    ts.store(y, [0, 0], e / ts.row_sum(e))


@ts.jit
def softmax8(x: ts.Tensor[[8, 32], ts.f32], y: ts.Out[[8, 32], ts.f32]):
    softmax_rows(x, y)


def naive_softmax_golden(t):
    e = t["x"].exp()
    t["y"][:] = e / e.sum(dim=-1, keepdim=True)


def test_a_golden_holding_nan_where_the_kernel_is_right_is_the_golden_s_named_at_its_line(capsys):
    from tilescope.analysis.localize.localize_command import localize
    from tilescope.harness import run_jit
    from tilescope.harness.specs import TensorSpec

    x = torch.randn(8, 32)
    x[2, 5] = 100.0  # exp overflows f32 in the golden (inf / inf); the kernel subtracts the row max
    specs = [TensorSpec("x", [8, 32], torch.float32, init_value=x), TensorSpec("y", [8, 32], torch.float32, is_output=True)]
    result = run_jit(softmax8, specs, golden_fn=naive_softmax_golden, triage=True)
    line = f"test_triage.py:{line_of(naive_softmax_golden, 'e / e.sum')}"
    assert "the golden holds NaN at 1 of the mismatching elements" in capsys.readouterr().out
    data = result.work_dir / "dfx_outputs" / "triage" / "data"
    for rep in (result.triage, localize(result.work_dir, data)):
        assert rep.category == "bad_input" and rep.culprit.kernel is None, rep.render()
        assert rep.summary.startswith("the golden of y holds NaN at 1 element where the run's output differs (the "
                                      "first at [2, 5]): golden_fn made it, 'div' at "), rep.summary  # fmt: skip
        assert f"{line} (`t[\"y\"][:] = e / e.sum(dim=-1, keepdim=True)`)" in rep.summary
        assert any("an Inf that golden_fn computed first, 'exp' at" in e for e in rep.evidence)


def test_a_bad_knob_in_the_environment_stops_triage_before_anything_runs(tmp_path, monkeypatch):
    prog = tp.short_store.compile(build_dir=str(tmp_path))
    inputs = tp.short_store_inputs()
    work = with_data(prog, inputs, {"z": tp.short_store_golden(inputs["x"])})
    monkeypatch.setenv("TILESCOPE_TASK_TIMEOUT_S", "-1")
    said = ("environment variable TILESCOPE_TASK_TIMEOUT_S='-1' (task_timeout_s): expected a number of seconds in "
            "0..604800 (a week; 0 = no budget)")  # fmt: skip
    with pytest.raises(ts.ConfigError) as info:
        triage(work)
    assert str(info.value) == said
    out = subprocess.run([sys.executable, "-m", "tilescope", "triage", str(work)], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr == f"[ERROR] {said}\n"
    assert not (work / "dfx_outputs" / "triage" / "report.json").exists()


def test_the_contained_steps_stop_in_one_line_never_a_traceback(tmp_path, capsys):
    from tilescope.analysis.triage.steps import STOPPED, STOPPED_STATUS, child_main

    request = tmp_path / "request.pt"
    torch.save({"work": str(tmp_path / "nope"), "crash_report": str(tmp_path / "crash.txt"), "program": "p",
                "data": str(tmp_path), "rtol": 1e-5, "atol": 1e-5, "progress": False, "budget": 10.0}, request)  # fmt: skip
    assert child_main(str(request)) == STOPPED_STATUS
    err = capsys.readouterr().err
    assert err.startswith(f"{STOPPED}build directory {tmp_path / 'nope'} does not exist") and err.count("\n") == 1 and "Traceback" not in err
    assert child_main(str(tmp_path / "missing.pt")) == STOPPED_STATUS
    err = capsys.readouterr().err
    assert err == f"{STOPPED}triage stopped: {tmp_path / 'missing.pt'} does not exist; the build and its data are as they were\n"
    torch.save({"work": str(tmp_path)}, request)  # a request without its fields: a defect of tilescope's own
    assert child_main(str(request)) == STOPPED_STATUS
    err = capsys.readouterr().err
    assert err.startswith(f"{STOPPED}triage failed inside tilescope (KeyError: ") and err.count("\n") == 1, err


def test_a_serial_environment_does_not_make_a_deterministic_program_a_race(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCOPE_SERIAL", "1")  # the program's own runs are serial; the shuffled ones are not
    prog = tp.pipeline.compile(build_dir=str(tmp_path))
    inputs = tp.pipeline_inputs()
    y = torch.zeros(5 * tp.B, tp.C)
    y[: 4 * tp.B] = inputs["x"][: 4 * tp.B] * 2
    work = with_data(prog, inputs, {"y": y, "z": tp.pipeline_golden(inputs["x"])})
    data = triaged(work)
    assert data["category"] == "pass" and data["deterministic"] is True, data
    assert "the same bit for bit across 6 shuffled schedules" in data["summary"] and data["limitations"] == []


@ts.kernel
def loss_partials(x: ts.Tensor[[4, 8], ts.f32], p: ts.Out[[1, 1], ts.f32]):
    ts.store(p, [0, 0], ts.row_sum(ts.col_sum(ts.load(x, [0, 0], [4, 8]))))


@ts.kernel
def loss_total(p: ts.Tensor[[2, 1], ts.f32], loss: ts.Out[[], ts.f32]):
    ts.store(loss, [], ts.col_sum(ts.load(p, [0, 0], [2, 1])) * 2.0)  # planted: the sum doubled


@ts.jit
def loss_sum(x: ts.Tensor[[8, 8], ts.f32], loss: ts.Out[[], ts.f32]):
    p = ts.create_tensor([2, 1], ts.f32)
    for r in ts.range(0, 8, 4):
        loss_partials(x[r : r + 4, :], p[r // 4 : r // 4 + 1, :])
    loss_total(p, loss)


def test_a_wrong_0_dim_loss_is_blamed_on_the_kernel_that_stores_it(tmp_path):
    prog = loss_sum.compile(build_dir=str(tmp_path))
    x = torch.randn(8, 8)
    work = with_data(prog, {"x": x, "loss": torch.zeros(())}, {"loss": x.sum()})
    data = triaged(work)
    assert data["category"] == "algorithm", data
    assert (data["culprit"]["task"], data["culprit"]["kernel"]) == (2, "loss_total")
    # the regions read as the program writes them (not as a submission mismatch of loss[0:1] and loss[])
    assert any("the 1 mismatching elements of loss lie in the output regions of task 2 (kernel loss_total): loss[]" in e
               for e in data["evidence"]), data["evidence"]  # fmt: skip
    assert not any("tilescope defect" in x for x in data["limitations"]), data["limitations"]
