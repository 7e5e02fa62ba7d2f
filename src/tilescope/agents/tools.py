"""The tools ``tilescope mcp`` serves, as plain functions of JSON arguments that answer JSON data;
nothing here needs the MCP SDK (``agents.server`` serves them).

Invariants:
- A tool is a ``Tool``: its name, what it is for, and its parameters (``Param``: a JSON type, a
  default, bounds, what it means). Its input schema and the check of a call's arguments are both
  made from them, so the two never disagree.
- ``answer(tool, arguments)`` never raises: a bad argument (missing, unknown, of the wrong type,
  out of bounds, a path that is not there) is an error naming the argument, what was expected
  and what to do; a ``TilescopeError`` is its message; anything else is a tilescope defect, said
  in one line that names the tool. Every answer is JSON data (NaN and ±Inf as strings).
- Each tool is the function behind a command (``triage``, ``localize``, ``replay``, ``dump``,
  ``deps``, ``trace``), so it answers what the command says, as data. The tools that run the
  program take turns (``RUNS``: one run at a time per server; queries go on beside them); a run
  that could crash the process runs isolated (replay on sim) or in a child (localize), so no
  kernel takes the server down.
- Nothing the user wrote is changed: ``propose_fix`` verifies its edit on a copy of the source.
"""

from __future__ import annotations

import json
import math
import shlex
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tilescope.analysis.localize.localize_command import internal_error
from tilescope.analysis.report import Report
from tilescope.analysis.triage.triage_command import DEFAULT_BUDGET, triage
from tilescope.build.manifest import Build
from tilescope.build.path_args import path_problem
from tilescope.errors import TilescopeError, clipped
from tilescope.harness.replay import replay_compiled, result_json, task_replay_json
from tilescope.launch.child import run_contained
from tilescope.launch.task import replay_task
from tilescope.tools.deps import load_deps, summary_json, task_json
from tilescope.tools.dump_data import load_dump, select
from tilescope.tools.dump_json import DEFAULT_RECORDS, DEFAULT_VALUES, dump_json, values_json
from tilescope.tools.trace import summarize_trace

RUNS = threading.Lock()  # the tools that run the program take turns
MAX_RECORDS, MAX_VALUES = 5000, 100_000
_TYPES = {"string": "a string", "integer": "an integer", "number": "a number"}


class ToolArgumentError(TilescopeError):
    """A tool was called with an argument it cannot use; ``argument`` names it."""

    def __init__(self, argument: str | None, message: str):
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class Param:
    """One argument of a tool: its JSON type, what it means, and what values it takes."""

    name: str
    type: str  # string | integer | number
    help: str
    required: bool = False
    default: Any = None
    minimum: float | None = None
    above: bool = False  # the minimum itself is refused (exclusiveMinimum)
    maximum: float | None = None
    enum: tuple[str, ...] = ()
    directory: bool = False  # a path that must name an existing directory

    def schema(self) -> dict[str, Any]:
        """This argument's JSON schema."""
        s: dict[str, Any] = {"type": self.type, "description": self.help}
        if self.default is not None:
            s["default"] = self.default
        if self.minimum is not None:
            s["exclusiveMinimum" if self.above else "minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        if self.enum:
            s["enum"] = list(self.enum)
        return s

    def check(self, value: Any) -> Any:
        """``value`` as this argument (a directory as its absolute path).

        Raises:
            ToolArgumentError: ``value`` is of the wrong type or out of bounds, or no directory.
        """
        if self.type == "string":
            ok = isinstance(value, str) and value != ""
        elif self.type == "integer":
            ok = _is_int(value) or (isinstance(value, float) and value.is_integer())
        else:
            ok = (_is_int(value) or isinstance(value, float)) and math.isfinite(value)
        if not ok:
            raise ToolArgumentError(self.name, f"{self.name} is {_shown(value)}, expected {self._expected()}: "
                                    f"{self.help}")  # fmt: skip
        if self.type == "integer":
            value = int(value)
        low = self.minimum is not None and (value <= self.minimum if self.above else value < self.minimum)
        if low or (self.maximum is not None and value > self.maximum) or (self.enum and value not in self.enum):
            raise ToolArgumentError(self.name, f"{self.name} is {_shown(value)}, expected {self._expected()}")
        if self.directory:
            path = Path(value).expanduser().absolute()
            problem = path_problem(path)
            if problem is not None:
                raise ToolArgumentError(self.name, f"{self.name} {clipped(path)}: {problem}")
            if not path.is_dir():
                what = "is a file, not a directory" if path.exists() else "does not exist"
                raise ToolArgumentError(
                    self.name, f"{self.name} {path} {what}: expected {self.help} (a relative path is taken from the "
                    f"server's working directory, {Path.cwd()}: pass an absolute path)")  # fmt: skip
            value = str(path)
        return value

    def _expected(self) -> str:
        if self.enum:
            return "one of " + ", ".join(repr(v) for v in self.enum)
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.above else '>='} {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"<= {self.maximum:g}")
        return _TYPES[self.type] + (f" {' and '.join(bounds)}" if bounds else "")


@dataclass(frozen=True)
class Tool:
    """A tool: its name, its description (what an agent reads to choose it), its parameters, the
    function that answers it (keyword arguments in, JSON data out), and whether it only reads."""

    name: str
    description: str
    params: tuple[Param, ...]
    fn: Callable[..., dict[str, Any]]
    read_only: bool = True
    runs: bool = False  # runs the program: takes its turn (RUNS)

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments (an object; no other property is accepted)."""
        return {"type": "object", "properties": {p.name: p.schema() for p in self.params},
                "required": [p.name for p in self.params if p.required], "additionalProperties": False}  # fmt: skip

    def arguments(self, given: Any) -> dict[str, Any]:
        """The keyword arguments of ``fn`` for the call's ``given`` arguments: each checked, a
        missing one (or null) given its default.

        Raises:
            ToolArgumentError: not an object, an unknown or missing argument, or a bad value.
        """
        if given is None:
            given = {}
        if not isinstance(given, Mapping):
            raise ToolArgumentError(None, f"the arguments are {_shown(given)}, expected an object of named arguments")
        known = {p.name: p for p in self.params}
        unknown = [k for k in given if k not in known]
        if unknown:
            raise ToolArgumentError(unknown[0], f"unknown argument {unknown[0]!r}: {self.name} takes "
                                    + ", ".join(p.name + ("" if p.required else "?") for p in self.params))  # fmt: skip
        out = {}
        for p in self.params:
            value = given.get(p.name)
            if value is None and p.required:
                raise ToolArgumentError(p.name, f"{p.name} is required: {p.help}")
            out[p.name] = p.default if value is None else p.check(value)
        return out


def answer(tool: Tool, arguments: Any) -> tuple[bool, dict[str, Any]]:
    """Call ``tool`` with ``arguments``: ``(True, its JSON data)``, or ``(False, the error)`` with
    ``tool``, ``error`` (its kind), ``argument`` (the one at fault, or null) and ``message``."""
    try:
        kwargs = tool.arguments(arguments)
        if tool.runs:
            with RUNS:
                return True, plain(tool.fn(**kwargs))
        return True, plain(tool.fn(**kwargs))
    except ToolArgumentError as e:
        return False, _error(tool.name, e, e.argument)
    except TilescopeError as e:
        return False, _error(tool.name, e)
    except Exception as e:  # noqa: BLE001 - the server goes on: a defect is said in one line
        return False, {"tool": tool.name, "error": "internal", "argument": None,
                       "message": internal_error(e, f"the {tool.name} tool")}  # fmt: skip


def unknown_tool(name: Any, tools: Mapping[str, Tool]) -> dict[str, Any]:
    """The error of a call to a tool that is not served."""
    return {"tool": str(name), "error": "unknown_tool", "argument": None,
            "message": f"no tool {name!r}: tilescope mcp serves {', '.join(tools)}"}  # fmt: skip


def _error(tool: str, e: Exception, argument: str | None = None) -> dict[str, Any]:
    return {"tool": tool, "error": type(e).__name__, "argument": argument, "message": str(e)}


def plain(value: Any) -> Any:
    """``value`` as JSON data: paths and other objects as strings, tuples as lists, NaN and ±Inf as
    the strings ``nan``, ``inf``, ``-inf`` (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy or torch scalar
        return plain(value.item())
    return str(value)


# -- the tools ---------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shown(v: Any) -> str:
    kind = {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "an array",
            dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)  # fmt: skip
    text = json.dumps(v) if isinstance(v, bool | int | float | str | type(None)) else ""
    return f"{text[:60]} ({kind})" if text else kind


def _build(path: str) -> str:
    """``path`` if it is a tilescope build directory."""
    try:
        Build(Path(path))
    except TilescopeError as e:
        raise ToolArgumentError("build_dir", f"build_dir: {e}") from None
    return path


def _triage(build_dir: str, golden_data: str | None, budget: float, rtol: float | None, atol: float | None,
            fix: bool = False) -> dict[str, Any]:  # fmt: skip
    rep = triage(_build(build_dir), golden_data, budget=budget, rtol=rtol, atol=atol, fix=fix)
    return rep.to_json()


def _propose_fix(**kwargs: Any) -> dict[str, Any]:
    return _triage(**kwargs, fix=True)


def _localize(build_dir: str, golden_data: str | None, rtol: float | None, atol: float | None) -> dict[str, Any]:
    # NOTE: in a child, as `tilescope localize --json`: its serial sim run is not isolated, and a
    # kernel that crashes there must not take the server down
    args = ["-m", "tilescope", "localize", _build(build_dir), "--json"]
    for flag, v in (("--golden-data", golden_data), ("--rtol", rtol), ("--atol", atol)):
        args += [flag, str(v)] if v is not None else []
    ended = run_contained(args, stdout="capture", stderr="capture")
    try:
        return Report.from_json(json.loads(ended.stdout)).to_json()  # NOTE: a report, or why not
    except (ValueError, TypeError):
        pass
    if ended.signal_name is not None:
        raise TilescopeError(
            f"localize died of {ended.signal_name}: a kernel crashes on this data, which localize does not explain; "
            "call triage, which runs the program isolated and names the crash")  # fmt: skip
    said = [x.removeprefix("[ERROR] ") for x in ended.stderr.splitlines() if x.startswith("[ERROR] ")]
    raise TilescopeError(said[0] if said else f"localize stopped (exit status {ended.returncode}): "
                         + " | ".join(ended.stderr.strip().splitlines()[-3:]))  # fmt: skip


def _replay(build_dir: str, golden_data: str | None, task: int | None, platform: str, rtol: float | None,
            atol: float | None) -> dict[str, Any]:  # fmt: skip
    cfg: dict[str, Any] = {"platform": platform, **({"isolate": True} if platform == "sim" else {})}
    if task is None:
        return result_json(replay_compiled(_build(build_dir), golden_data=golden_data, rtol=rtol, atol=atol, **cfg))
    given = [n for n, v in (("golden_data", golden_data), ("rtol", rtol), ("atol", atol)) if v is not None]
    if given:
        it, verb = ("it", "applies") if len(given) == 1 else ("them", "apply")
        raise ToolArgumentError(given[0], f"{' and '.join(given)} only {verb} to replaying the whole program, not one "
                                f"task: drop {it}, or drop task")  # fmt: skip
    return task_replay_json(replay_task(_build(build_dir), task, **cfg))


def _dump_records(build_dir: str, task: int | None, kernel: str | None, stage: str | None, role: str | None,
                  arg: int | None, limit: int) -> dict[str, Any]:  # fmt: skip
    d = load_dump(build_dir)
    given = {"task": task, "kernel": kernel, "stage": stage, "role": role, "arg": arg}
    return dump_json(d, select(d, **{k: v for k, v in given.items() if v is not None}), limit)


def _dump_values(build_dir: str, index: int, offset: int, limit: int) -> dict[str, Any]:
    d = load_dump(build_dir)
    return values_json(d, select(d, index=index)[0], offset, limit)


def _deps(build_dir: str, task: int | None) -> dict[str, Any]:
    data = load_deps(build_dir)
    return summary_json(data) if task is None else task_json(data, task)


def _trace(build_dir: str) -> dict[str, Any]:
    return summarize_trace(build_dir).to_json()


def _bisect(repo_dir: str, good: str, bad: str, command: str, metric: str | None, threshold: float | None,
            jobs: int, timeout: float | None) -> dict[str, Any]:  # fmt: skip
    # NOTE: in a child, as `tilescope bisect --json` run in repo_dir: the command runs at each revision
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise ToolArgumentError("command", f"command {command!r} is not a shell command line: {e}") from None
    args = ["-m", "tilescope", "bisect", "--good", good, "--bad", bad, "-j", str(jobs), "--json"]
    for flag, v in (("--metric", metric), ("--threshold", threshold), ("--timeout", timeout)):
        args += [flag, str(v)] if v is not None else []
    ended = run_contained([*args, "--", *argv], stdout="capture", stderr="capture", cwd=repo_dir)
    try:
        return json.loads(ended.stdout)
    except ValueError:
        said = [x.removeprefix("tilescope bisect: error: ") for x in ended.stderr.splitlines() if "error:" in x]
        raise TilescopeError(said[-1] if said else f"bisect stopped (exit status {ended.returncode}): "
                             + " | ".join(ended.stderr.strip().splitlines()[-3:])) from None  # fmt: skip


_BUILD = Param("build_dir", "string", "the path of a build directory (build_output/_jit_<fn>_<stamp>; `tilescope builds` "
               "lists them)", required=True, directory=True)  # fmt: skip
_RUN_BUILD = replace(_BUILD, help=_BUILD.help + " with saved data (a run with --save-data)")
_GOLDEN = Param("golden_data", "string", "a data directory (in/ and out/) to use instead of the build's data/",
                directory=True)  # fmt: skip
_RTOL = Param("rtol", "number", "relative tolerance (default: the one the data were saved with)", minimum=0)
_ATOL = Param("atol", "number", "absolute tolerance (default: the one the data were saved with)", minimum=0)
_TASK = Param("task", "integer", "a task id, as reports name it (task 3 -> 3)", minimum=0)


def _budget(default: float | None) -> Param:
    told = f"default {default:g}" if default is not None else f"default $TILESCOPE_TRIAGE_BUDGET, else {DEFAULT_BUDGET:g}"
    return Param("budget", "number", f"CPU seconds to spend before answering what is known: a busy machine makes the "
                 f"answer slower, not less sure ({told})", default=default,
                 minimum=0, above=True)  # fmt: skip


TOOLS: tuple[Tool, ...] = (
    Tool("triage", "Classify why a build fails on its saved data and name the culprit: the category (crash, hang, "
         "deadlock, out_of_bounds, nan, race, uninitialized, codegen, algorithm, precision, compile_error, "
         "signature, bad_input, pass, unknown), the task, kernel, op, DSL line and C++ line, the evidence and the "
         "next commands. The report JSON of `tilescope triage --json`. Start here.",
         (_RUN_BUILD, _GOLDEN, _budget(None), _RTOL, _ATOL), _triage, read_only=False, runs=True),
    Tool("propose_fix", "Triage the build, then propose an edit of the DSL source and verify it on a copy against "
         "the saved data (the user's file is never changed). The triage report JSON; its `fix` holds `edit` "
         "(file, line, before, after, why; null when none), `verified`, `comparison`, `tried` and `why_none`.",
         (_RUN_BUILD, _GOLDEN, _budget(120.0), _RTOL, _ATOL), _propose_fix, read_only=False, runs=True),
    Tool("localize", "Name the culprit of a wrong answer (not a crash): every task re-executed alone on the "
         "reference interpreter in float64; category codegen, algorithm or precision (guilty or innocent), the "
         "culprit and the tolerance the data justify. The report JSON of `tilescope localize --json`.",
         (_RUN_BUILD, _GOLDEN, _RTOL, _ATOL), _localize, read_only=False, runs=True),
    Tool("replay", "Re-run the build on its saved data (sim runs isolated) and compare each output with the golden "
         "(mismatches, max abs/rel diff and where, pass/fail); with `task`, run that one saved task alone on its "
         "saved inputs (a failing run saves them) and give its outputs' statistics.",
         (_RUN_BUILD, _GOLDEN, replace(_TASK, help="replay only this task, alone on the inputs a failing run saved "
                                       "(dfx_outputs/failure/task_<id>)"),
          Param("platform", "string", "sim (the compiled kernels) or interp (the reference interpreter)",
                default="sim", enum=("sim", "interp")), _RTOL, _ATOL), _replay, read_only=False, runs=True),  # fmt: skip
    Tool("dump_records", "List the records of the build's tensor dump (a run with --dump-tensor or --probes): "
         "per record its index, task, kernel, stage (before/after/probe), role, argument, tensor and region, "
         "dtype, shape and flags; filters combine. Read the values with dump_values.",
         (replace(_BUILD, help="a build directory whose run wrote dfx_outputs/tensor_dump"), _TASK,
          Param("kernel", "string", "a kernel name"),
          Param("stage", "string", "before, after or probe", enum=("before", "after", "probe")),
          Param("role", "string", "the argument's role", enum=("input", "output", "inout", "scalar", "probe")),
          Param("arg", "integer", "an argument index", minimum=0),
          Param("limit", "integer", "records returned at most (left_out counts the rest)", default=DEFAULT_RECORDS,
                minimum=0, maximum=MAX_RECORDS)), _dump_records),  # fmt: skip
    Tool("dump_values", "The values of one tensor-dump record (its index from dump_records), flat in row-major "
         "order from `offset`, at most `limit` of them (left_out counts the rest), with min, max and mean over "
         "the finite values and the NaN and Inf counts of the whole record.",
         (replace(_BUILD, help="a build directory whose run wrote dfx_outputs/tensor_dump"),
          Param("index", "integer", "the record's index (dump_records lists them)", required=True, minimum=0),
          Param("offset", "integer", "the first element returned (row-major)", default=0, minimum=0),
          Param("limit", "integer", "values returned at most", default=DEFAULT_VALUES, minimum=0,
                maximum=MAX_VALUES)), _dump_values),  # fmt: skip
    Tool("deps", "The dependency graph a run recorded (--enable-dep-gen, or any localize): without `task`, the "
         "counts of tasks and edges, the roots, the sinks and the critical path; with `task`, its kernel, its "
         "arguments and regions, and every edge in and out of it with the kind (RAW, WAW, WAR, ORDER), the "
         "tensor and the regions it carries.",
         (replace(_BUILD, help="a build directory whose run wrote dfx_outputs/deps.json"), _TASK), _deps),
    Tool("trace", "The run trace summarized (a run with --trace): wall time, per kernel its tasks and time, per "
         "worker its use, and the critical path (with --enable-dep-gen).",
         (replace(_BUILD, help="a build directory whose run wrote dfx_outputs/trace.json"),), _trace),
    Tool("bisect", "The first commit between a good and a bad revision at which a command (a model script run with "
         "--save-data) goes wrong, or a comparison metric passes a threshold: its hash, subject, author, date and "
         "the kernel sources it changed, and the triage of its failing build (category, kernel, op, line). The "
         "JSON of `tilescope bisect --json`, run in repo_dir; the user's checkout is never touched.",
         (Param("repo_dir", "string", "the directory the command runs in, inside the git repository", required=True,
                directory=True),
          Param("good", "string", "a revision where the command passes", required=True),
          Param("bad", "string", "a later revision where it fails (e.g. HEAD)", required=True),
          Param("command", "string", "the command line run at each revision (e.g. python models/attn.py --save-data)",
                required=True),
          Param("metric", "string", "decide by this comparison figure instead of the exit status",
                enum=("max_abs_err", "max_rel_err", "mismatch_fraction")),
          Param("threshold", "number", "with metric: a revision whose figure is above it is bad", minimum=0),
          Param("jobs", "integer", "revisions tested at once (a k-ary search)", default=1, minimum=1),
          Param("timeout", "number", "seconds a run may take before the revision counts as a hang", minimum=0,
                above=True)), _bisect, read_only=False, runs=True),
)  # fmt: skip


__all__ = ["RUNS", "TOOLS", "Param", "Tool", "ToolArgumentError", "answer", "plain", "unknown_tool"]
