"""`tilescope mcp`: the server started as a coding agent's client starts it (a subprocess spoken to
over stdio through the SDK's client), on a real failing build: the tools listed with their schemas,
triage and propose_fix naming and fixing the planted bug, the queries of an instrumented run, bad
arguments answered as tool errors by a server that goes on, and stdout kept for the protocol."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import triage_programs as tp
from helpers import NO_LIMIT_S, line_of

from tilescope.analysis.data import save_snapshot

pytest.importorskip("mcp", reason="tilescope mcp needs the mcp SDK: pip install 'tilescope[agents]'")
import anyio  # noqa: E402 - the SDK's dependency: only there when it is
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

TOOLS = {"triage", "propose_fix", "localize", "replay", "dump_records", "dump_values", "deps", "trace", "bisect"}


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> Path:
    """The short store (a store loop one chunk short) compiled, with its inputs and golden saved."""
    prog = tp.short_store.compile(build_dir=str(tmp_path_factory.mktemp("failing")))
    inputs = tp.short_store_inputs()
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"z": tp.short_store_golden(inputs["x"])},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    return prog.work_dir


@pytest.fixture(scope="module")
def instrumented(tmp_path_factory) -> Path:
    """The short store run once with the tensor dump, the dependency graph and the trace on."""
    prog = tp.short_store.compile(build_dir=str(tmp_path_factory.mktemp("instrumented")))
    inputs = tp.short_store_inputs()
    prog.run(inputs["x"], inputs["z"], enable_dump_tensor=2, enable_dep_gen=True, enable_trace=True)
    return prog.work_dir


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("TILESCOPE_") or k in ("PYTHONPATH", "CXX")}


@contextlib.asynccontextmanager
async def served(errlog, argv=("-m", "tilescope", "mcp"), faults: list | None = None):
    """A client session with a server started as ``python ARGV``; its stderr goes to ``errlog``, and
    what the client could not read off the wire to ``faults``."""

    async def on_message(message) -> None:
        if isinstance(message, Exception) and faults is not None:
            faults.append(message)

    params = StdioServerParameters(command=sys.executable, args=list(argv), env=_env())
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            yield session


def _error(result) -> dict:
    assert result.is_error, result.structured_content
    data = result.structured_content
    assert set(data) == {"tool", "error", "argument", "message"}
    assert result.content[0].text == f"tilescope {data['tool']}: {data['message']}"
    return data


@pytest.mark.slow
def test_the_tools_are_listed_each_with_its_input_schema(tmp_path):
    async def main():
        with open(tmp_path / "stderr", "w") as log:
            async with served(log) as s:
                return (await s.list_tools()).tools

    tools = {t.name: t for t in anyio.run(main)}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and t.input_schema["type"] == "object" and t.input_schema["additionalProperties"] is False
        first = "repo_dir" if t.name == "bisect" else "build_dir"  # bisect works on a repository, not a build
        assert first in t.input_schema["properties"] and first in t.input_schema["required"]
    assert tools["bisect"].input_schema["required"] == ["repo_dir", "good", "bad", "command"]
    assert tools["dump_values"].input_schema["required"] == ["build_dir", "index"]
    assert tools["triage"].input_schema["properties"]["budget"] == {
        "type": "number", "exclusiveMinimum": 0,
        "description": "CPU seconds to spend before answering what is known: a busy machine makes the answer slower, "
                       "not less sure (default $TILESCOPE_TRIAGE_BUDGET, else 60)"}
    assert tools["propose_fix"].input_schema["properties"]["budget"]["default"] == 120.0
    assert tools["replay"].input_schema["properties"]["platform"]["enum"] == ["sim", "interp"]
    assert tools["trace"].annotations.read_only_hint is True and tools["triage"].annotations.read_only_hint is False


@pytest.mark.slow
def test_triage_names_the_short_store_and_propose_fix_verifies_the_loop_bound(failing, instrumented, tmp_path):
    source = Path(tp.__file__)
    before = source.read_bytes()
    seen: dict[str, float] = {}

    async def main():
        with open(tmp_path / "stderr", "w") as log:
            async with served(log) as s:
                got = {}

                async def call_triage():
                    got["triage"] = await s.call_tool("triage", {"build_dir": str(failing)})
                    seen["triage"] = time.monotonic()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call_triage)
                    await anyio.sleep(0.5)
                    # the server answers while triage runs: calls run off its event loop
                    got["listed"] = await s.list_tools()
                    got["query"] = await s.call_tool("deps", {"build_dir": str(instrumented), "task": 0})
                    seen["answered"] = time.monotonic()
                got["fix"] = await s.call_tool("propose_fix", {"build_dir": str(failing), "budget": NO_LIMIT_S})
                return got

    got = anyio.run(main)
    assert seen["answered"] < seen["triage"], "the server did not answer while a triage ran"
    assert len(got["listed"].tools) == len(TOOLS) and got["query"].structured_content["kernel"] == "scale_rows_short"
    triaged = got["triage"]
    assert not triaged.is_error, triaged.content[0].text
    data = triaged.structured_content
    assert data["format"] == "tilescope-localize" and data["tool"] == "triage"
    assert data["category"] == "uninitialized"
    c = data["culprit"]
    assert (c["task"], c["kernel"], c["op"]) == (0, "scale_rows_short", "range")  # the loop that stops short
    assert c["dsl_line"].endswith(f"triage_programs.py:{line_of(tp.scale_rows_short, 'for h in ts.range')}")
    assert "y[:, 448:512] is never written" in data["summary"]

    fixed = got["fix"]
    assert not fixed.is_error, fixed.content[0].text
    fix = fixed.structured_content["fix"]
    assert fix["verified"] is True and fix["edit"]["line"] == line_of(tp.scale_rows_short, "for h in ts.range")
    assert fix["edit"]["file"] == str(source)
    assert fix["edit"]["before"].strip() == "for h in ts.range(0, W - 64, 64):  # the bug: one chunk short"
    assert fix["edit"]["after"].strip() == "for h in ts.range(0, W, 64):  # the bug: one chunk short"
    assert fix["comparison"].startswith("every output within rtol=")
    # the same edit as a unified diff of the user's file, for the agent to apply
    assert "\n-    for h in ts.range(0, W - 64, 64):" in fix["diff"] and "\n+    for h in ts.range(0, W, 64):" in fix["diff"]
    assert fix["diff"].startswith("--- a/") and f"{source.name}\n+++ b/" in fix["diff"]
    assert source.read_bytes() == before  # the user's file is never touched


@pytest.mark.slow
def test_the_queries_read_what_an_instrumented_run_wrote(instrumented, tmp_path):
    work = str(instrumented)

    async def main():
        with open(tmp_path / "stderr", "w") as log:
            async with served(log) as s:
                calls = {
                    "records": ("dump_records", {"build_dir": work, "kernel": "scale_rows_short", "stage": "after"}),
                    "few": ("dump_records", {"build_dir": work, "limit": 2}),
                    "deps": ("deps", {"build_dir": work}),
                    "task": ("deps", {"build_dir": work, "task": 2}),
                    "trace": ("trace", {"build_dir": work}),
                }
                got = {k: await s.call_tool(name, args) for k, (name, args) in calls.items()}
                index = got["records"].structured_content["records"][0]["index"]
                got["values"] = await s.call_tool("dump_values", {"build_dir": work, "index": index, "limit": 10})
                got["later"] = await s.call_tool("dump_values", {"build_dir": work, "index": index, "offset": 5,
                                                                  "limit": 5})  # fmt: skip
                return got

    got = anyio.run(main)
    for k, r in got.items():
        assert not r.is_error, (k, r.content[0].text)
    records = got["records"].structured_content
    assert records["program"] == "short_store" and records["level"] == 2
    assert records["matched"] == records["returned"] == 2 and records["left_out"] == 0
    r = records["records"][0]
    assert (r["task_id"], r["kernel"], r["stage"], r["role"], r["tensor"]) == (
        0, "scale_rows_short", "after_completion", "output", "y")  # fmt: skip
    assert r["region"] == "y[0:64, 0:512]" and r["shape"] == [64, 512] and r["dtype"] == "f32"
    few = got["few"].structured_content
    assert few["returned"] == 2 and few["left_out"] == few["matched"] - 2 > 0

    values = got["values"].structured_content
    assert values["returned"] == 10 and values["left_out"] == 64 * 512 - 10 and len(values["values"]) == 10
    assert values["stats"]["numel"] == 64 * 512 and values["stats"]["nan"] == 0
    later = got["later"].structured_content
    assert later["offset"] == 5 and later["values"] == values["values"][5:10] and later["left_out"] == 64 * 512 - 5

    deps = got["deps"].structured_content
    assert (deps["program"], deps["tasks"], deps["edges"]) == ("short_store", 4, 2)
    assert deps["roots"] == [0, 1] and deps["sinks"] == [2, 3] and deps["by_kind"] == {"RAW": 2}
    task = got["task"].structured_content
    assert task["kernel"] == "add_one" and [a["text"] for a in task["args"]] == ["y[0:64, 0:512]", "z[0:64, 0:512]"]
    (pred,) = task["predecessors"]
    assert (pred["task"], pred["kernel"], pred["kind"], pred["tensor"]) == (0, "scale_rows_short", "RAW", "y")
    assert pred["overlap"] == [[0, 64], [0, 512]] and task["successors"] == []

    trace = got["trace"].structured_content
    assert trace["program"] == "short_store" and trace["num_tasks"] == 4
    assert {k["name"] for k in trace["kernels"]} == {"scale_rows_short", "add_one"}
    assert len(trace["critical_path"]) == 2


@pytest.mark.slow
def test_bad_arguments_are_tool_errors_and_the_server_goes_on(failing, instrumented, tmp_path):
    calls = [
        ("triage", {}),
        ("triage", {"build_dir": str(tmp_path / "nope")}),
        ("triage", {"build_dir": str(failing), "budget": "soon"}),
        ("triage", {"build_dir": str(failing), "budget": 0}),
        ("triage", {"build_dir": str(failing), "bugdet": 5}),
        ("localize", {"build_dir": str(tmp_path)}),
        ("deps", {"build_dir": str(instrumented), "task": 99}),
        ("deps", {"build_dir": str(instrumented), "task": True}),
        ("replay", {"build_dir": str(failing), "task": 7}),
        ("replay", {"build_dir": str(failing), "platform": "gpu"}),
        ("dump_values", {"build_dir": str(instrumented), "index": 10_000}),
        ("dump_records", {"build_dir": str(failing)}),
        ("no_such_tool", {}),
    ]

    async def main():
        with open(tmp_path / "stderr", "w") as log:
            async with served(log) as s:
                answers = [await s.call_tool(name, args) for name, args in calls]
                answers.append(await s.call_tool("deps", {"build_dir": str(instrumented), "task": 0}))
                return answers

    *errors, after = anyio.run(main)
    said = [_error(r) for r in errors]
    missing, nope, word, zero, typo, not_build, task, boolean, no_saved, gpu, index, no_dump, unknown = said
    assert (missing["argument"], missing["message"]) == ("build_dir", "build_dir is required: the path of a build "
        "directory (build_output/_jit_<fn>_<stamp>; `tilescope builds` lists them) with saved data (a run with "
        "--save-data)")  # fmt: skip
    assert nope["argument"] == "build_dir" and f"build_dir {tmp_path / 'nope'} does not exist" in nope["message"]
    assert word["message"].startswith('budget is "soon" (a string), expected a number > 0')
    assert zero["message"] == "budget is 0 (an integer), expected a number > 0"
    assert typo["argument"] == "bugdet" and "triage takes build_dir, golden_data?, budget?" in typo["message"]
    assert not_build["argument"] == "build_dir" and "has no kernel_config.py" in not_build["message"]
    assert task["error"] == "DepsError" and "no task 99 in" in task["message"] and "ids are 0..3" in task["message"]
    assert boolean["message"].startswith("task is true (a boolean), expected an integer >= 0")
    assert "no saved task to replay" in no_saved["message"] and "has no saved tasks" in no_saved["message"]
    assert gpu["message"] == "platform is \"gpu\" (a string), expected one of 'sim', 'interp'"
    assert "out of range: the dump has records 0-" in index["message"]
    assert "run with --dump-tensor" in no_dump["message"]
    assert unknown["error"] == "unknown_tool" and "tilescope mcp serves triage, propose_fix" in unknown["message"]
    assert not after.is_error and after.structured_content["kernel"] == "scale_rows_short"


@pytest.mark.slow
def test_replay_runs_a_saved_task_alone_and_localize_answers_in_its_format(failing, tmp_path):
    prog = tp.log_rows.compile(build_dir=str(tmp_path))
    inputs = tp.log_rows_inputs()
    info = prog.run(inputs["x"], inputs["y"], nan_check=True)  # it saves the inputs of the task making a NaN
    assert info.nan is not None and info.nan.task_id == 1

    async def main():
        with open(tmp_path / "stderr", "w") as log:
            async with served(log) as s:
                alone = await s.call_tool("replay", {"build_dir": str(prog.work_dir), "task": 1})
                mixed = await s.call_tool("replay", {"build_dir": str(prog.work_dir), "task": 1, "rtol": 0.1})
                localized = await s.call_tool("localize", {"build_dir": str(failing)})
                return alone, mixed, localized

    alone, mixed, localized = anyio.run(main)
    data = alone.structured_content
    assert (data["mode"], data["task"], data["kernel"], data["saved_because"], data["passed"]) == (
        "task", 1, "log_shift", "nan", True)  # fmt: skip
    y = data["outputs"]["y"]
    assert y["shape"] == [tp.B, tp.C] and y["dtype"] == "float32" and y["nan"] >= 1 and y["numel"] == tp.B * tp.C
    assert _error(mixed)["message"] == (
        "rtol only applies to replaying the whole program, not one task: drop it, or drop task")
    rep = localized.structured_content
    assert not localized.is_error and (rep["format"], rep["tool"]) == ("tilescope-localize", "localize")
    assert rep["build"] == str(failing) and rep["category"] in ("codegen", "algorithm", "precision")
    assert rep == json.loads((failing / "dfx_outputs" / "localize" / "report.json").read_text())


NOISY = textwrap.dedent("""
    import os, subprocess, sys
    from tilescope.agents import server, tools

    def noise():
        print("noise: print to sys.stdout")
        os.write(1, b"noise: a write to fd 1\\n")
        subprocess.run(["echo", "noise: a child process on fd 1"], check=True)
        return {"noise": "made"}

    server.serve(tools.TOOLS + (tools.Tool("noise", "prints everywhere", (), noise),))
""")


@pytest.mark.slow
def test_what_tilescope_and_its_children_print_never_reaches_the_wire(failing, tmp_path):
    faults: list = []

    async def main():
        with open(tmp_path / "stderr", "w") as log:
            async with served(log, ("-c", NOISY), faults) as s:
                noise = await s.call_tool("noise", {})
                replayed = await s.call_tool("replay", {"build_dir": str(failing)})  # prints [RUN] and [FAIL]
                listed = await s.list_tools()
                return noise, replayed, listed

    noise, replayed, listed = anyio.run(main)
    assert faults == []
    assert noise.structured_content == {"noise": "made"} and len(listed.tools) == len(TOOLS) + 1
    out = replayed.structured_content
    assert out["mode"] == "program" and out["passed"] is False and out["error"] is None
    (z,) = out["outputs"]
    # the last 64 columns are never written: what they hold may match the golden here and there
    assert z["name"] == "z" and not z["passed"] and 0 < z["mismatches"] <= 2 * tp.R * 64 and z["max_abs_at"][1] >= 448
    log = (tmp_path / "stderr").read_text()
    for line in ("noise: print to sys.stdout", "noise: a write to fd 1", "noise: a child process on fd 1",
                 f"[FAIL] short_store on sim ({failing})"):  # fmt: skip
        assert line in log


def test_without_the_sdk_the_command_names_the_fix():
    code = "import sys; sys.modules['mcp'] = None; from tilescope.cli import main; sys.exit(main(['mcp']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("tilescope mcp: the Model Context Protocol SDK (the mcp package) cannot be imported")
    assert done.stderr.strip().endswith("install it with: pip install 'tilescope[agents]'")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_tool_answers_as_its_function_does_without_the_server(failing):
    from tilescope.agents.tools import TOOLS as SERVED
    from tilescope.agents.tools import Tool, answer, plain

    deps = next(t for t in SERVED if t.name == "deps")
    ok, data = answer(deps, {"build_dir": str(failing), "task": "0"})
    assert not ok and data["argument"] == "task" and data["message"].startswith('task is "0" (a string)')
    ok, data = answer(deps, ["build_dir"])
    assert not ok and data["message"] == "the arguments are an array, expected an object of named arguments"

    def broken():
        return {}["missing"]

    ok, data = answer(Tool("broken", "raises", (), broken), {})
    assert not ok and data["error"] == "internal" and data["message"].startswith(
        "the broken tool failed inside tilescope (KeyError: 'missing' at test_mcp.py:")  # fmt: skip
    assert plain({"a": (1.5, float("nan"), float("-inf")), "p": Path("/x"), "t": torch.tensor(2.0)}) == {
        "a": [1.5, "nan", "-inf"], "p": "/x", "t": 2.0}  # fmt: skip


def test_a_build_path_the_system_cannot_look_up_is_a_clear_argument_error():
    from tilescope.agents.tools import _BUILD, ToolArgumentError
    from tilescope.errors import clipped

    long = "/" + "a" * 5000
    with pytest.raises(ToolArgumentError) as e:
        _BUILD.check(long)
    assert e.value.argument == "build_dir"
    assert str(e.value).startswith(f"build_dir {clipped(long)}: too long for the file system: a name in it has 5000 ")
    assert "a" * 300 not in str(e.value)
