"""One typed registry of every option: compile knobs, runtime knobs, and the environment.

Each knob has one name through every layer (``runtime_cfg`` key, observer, log line), one help
text, an environment variable, and — where a model script may set it — one CLI flag that
``harness.cli`` generates from this table (``add_runtime_args`` / ``add_harness_args``).

Invariants:
- ``compile_cfg`` and ``runtime_cfg`` accept only registered keys; an unknown key is a
  ConfigError listing the known ones.
- A value comes from, in order: the call (``runtime_cfg``/``compile_cfg``, or a CLI flag), an
  ``override(...)`` block around the call, the knob's environment variable, the default.
- A value from the environment is parsed for the knob's type (bools accept 1/0, true/false,
  yes/no, on/off) and checked like a given one: ``compile_options`` / ``runtime_options`` raise
  a ConfigError naming the variable; ``Knob.value`` alone never raises and ignores an invalid
  environment value.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tilescope.errors import ConfigError

LOG_LEVELS = ("debug", *(f"v{i}" for i in range(10)), "info", "warn", "error", "null")
PLATFORMS = ("sim", "interp")
BF16_MATMULS = ("exact", "dot")  # compile option bf16_matmul
MAX_WORKERS = 1024  # num_workers: worker threads of one runtime
MAX_TASKS = 4_000_000  # max_tasks' default: about 2 GB of task graph (some 550 bytes a task)
# local_memory_bytes: a worker's tiles live on its stack, twice this size; no machine maps 2 TiB stacks
MAX_LOCAL_MEMORY_BYTES = 1 << 40
MAX_TASK_TIMEOUT_S = 7 * 24 * 3600.0  # task_timeout_s: a week (0 is the way to say "no budget")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "tilescope_knobs", default=MappingProxyType({})
)


@dataclass(frozen=True)
class Flag:
    """The CLI flag of a knob: its spellings, its argument group, and argparse's options (the
    ``dest`` is always the knob's name and the help the knob's)."""

    names: tuple[str, ...]
    group: str
    options: dict[str, Any] = field(default_factory=dict)


def parse_bool(raw: str) -> bool | None:
    """``1/true/yes/on`` -> True, ``0/false/no/off`` -> False (any case); None for anything else."""
    low = raw.strip().lower()
    return True if low in _TRUE else False if low in _FALSE else None


@dataclass(frozen=True)
class Knob:
    """One option: name, default, help, validity check, environment variable and CLI flag."""

    name: str
    default: Any
    help: str
    check: Callable[[Any], bool] = lambda v: True
    expect: str = ""
    env: str | None = ""  # "" -> TILESCOPE_<NAME>; None -> no environment variable
    flag: Flag | None = None
    kind: type | None = None  # how to parse the environment's text (default: the default's type)

    @functools.cached_property
    def env_var(self) -> str | None:
        """The environment variable that sets this knob, or None when it has none."""
        return f"TILESCOPE_{self.name.upper()}" if self.env == "" else self.env

    def parse(self, raw: str) -> Any:
        """The environment's text as this knob's type; None if it does not parse."""
        kind = self.kind or (type(self.default) if self.default is not None else str)
        if kind is bool:
            return parse_bool(raw)
        try:
            return kind(raw)
        except ValueError:
            return None

    def env_value(self) -> Any:
        """The value set by the knob's environment variable, or None when it is unset; a
        ConfigError naming the variable when it is invalid."""
        var = self.env_var
        raw = os.environ.get(var) if var else None
        if not raw:
            return None
        v = self.parse(raw)
        if v is None or not self.check(v):
            raise ConfigError(f"environment variable {var}={raw!r} ({self.name}): expected {self.expect}")
        return v

    def is_set(self) -> bool:
        """Whether an ``override`` block or the environment sets this knob (to any value, an
        invalid one included, which ``runtime_options`` then reports)."""
        var = self.env_var
        return self.name in _overrides.get() or bool(var and os.environ.get(var))

    def value(self, given: Any = None) -> Any:
        """``given``, else an ``override`` block's value, else the environment's, else the
        default. Never raises: an invalid environment value counts as unset here and is
        reported by ``_validate``."""
        if given is not None:
            return given
        if self.name in _overrides.get():
            return _overrides.get()[self.name]
        try:
            v = self.env_value()
        except ConfigError:
            v = None
        return self.default if v is None else v


def _is_int(lo: int, hi: int | None = None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool) or (isinstance(v, int) and v in (0, 1))


def _is_seconds(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= MAX_TASK_TIMEOUT_S


def _is_names(v: Any) -> bool:
    if isinstance(v, str):
        return bool(v.strip())
    return isinstance(v, list | tuple) and bool(v) and all(isinstance(n, str) and n for n in v)


def kernel_names(v: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """The names a ``kernel_filter`` value lists (None: no filter)."""
    if v is None:
        return None
    parts = v.split(",") if isinstance(v, str) else list(v)
    return [p.strip() for p in parts if p.strip()]


COMPILE_KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "dump_passes",
            False,
            "write the IR after every pass (passes_dump/NN_after_<Pass>.py)",
            _is_bool,
            "a bool",
            flag=Flag(("--dump-passes",), "compile", {"action": "store_true"}),
        ),
        Knob(
            "local_memory_bytes",
            256 * 1024,
            "per-core local memory capacity: a kernel whose live tiles exceed it is a compile error; a worker's "
            "stack holds twice it, so a run also needs workers x 2 x it of memory when that is past 8 MiB a worker",
            _is_int(1, MAX_LOCAL_MEMORY_BYTES),
            f"an int of bytes in 1..{MAX_LOCAL_MEMORY_BYTES} (1 TiB: a worker's stack holds twice it)",
        ),
        Knob(
            "build_dir",
            "build_output",
            "base directory of build directories",
            lambda v: isinstance(v, str | os.PathLike),
            "a path",
            env="TILESCOPE_BUILD_DIR",
        ),
        Knob("verify", True, "run the IR verifier after every pass", _is_bool, "a bool"),
        Knob(
            "strict",
            False,
            "compile warnings are errors: a kernel that cannot write part of an Out param (the union of its "
            "stores over its loops) fails the compile instead of warning",
            _is_bool,
            "a bool",
            flag=Flag(("--strict",), "compile", {"action": "store_true"}),
        ),
        Knob(
            "check_bounds",
            True,
            "checked build (the default): every tile load/store and dynamic index checks its bounds at "
            "run time and reports the kernel, op, DSL line, index, shape and task on a violation; "
            "False (--no-check-bounds) leaves the checks out",
            _is_bool,
            "a bool",
            flag=Flag(("--check-bounds",), "compile", {"action": "BooleanOptionalAction"}),
        ),
        Knob(
            "bf16_matmul",
            "exact",
            "how a kernel multiplies bf16 tiles: 'exact' (the default) widens them to f32 and takes one fused "
            "multiply-add per k; 'dot' uses the CPU's bf16 dot-product instruction (AVX-512 BF16) where it has "
            "one: the same order and bits, except that a subnormal input, product or partial sum is flushed to "
            "zero (interp keeps them); elsewhere 'dot' is 'exact'",
            lambda v: v in BF16_MATMULS,
            "'exact' or 'dot'",
            flag=Flag(("--bf16-matmul",), "compile", {"choices": BF16_MATMULS}),
        ),
    )
}

RUNTIME_KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "platform",
            "sim",
            "where to run: sim (compiled kernels on threads) or interp",
            PLATFORMS.__contains__,
            f"one of {', '.join(PLATFORMS)}",
            flag=Flag(("-p", "--platform"), "run", {"choices": PLATFORMS}),
        ),
        Knob(
            "device_id",
            0,
            "device index (sim and interp have one device, 0)",
            _is_int(0, 0),
            "0",
            flag=Flag(("-d", "--device"), "run", {"type": int, "metavar": "ID"}),
        ),
        Knob(
            "num_workers",
            0,
            f"worker threads running tasks; 0 = one per CPU (at most {MAX_WORKERS}: each worker is an OS thread)",
            _is_int(0, MAX_WORKERS),
            f"an int in 0..{MAX_WORKERS} (each worker is an OS thread with its own stack; 0 = one per CPU)",
            flag=Flag(("--workers",), "run", {"type": int, "metavar": "N"}),
        ),
        Knob(
            "log_level",
            None,
            "log level: debug, v0..v9 (v0 most verbose, v5 = info), info, warn, error, null",
            LOG_LEVELS.__contains__,
            f"one of {', '.join(LOG_LEVELS)}",
            flag=Flag(("--log-level",), "run", {"choices": LOG_LEVELS, "metavar": "LEVEL"}),
            kind=str,
        ),
        Knob(
            "float64",
            False,
            "interp only: compute every float op in float64 (a reference for precision work)",
            _is_bool,
            "a bool",
            flag=Flag(("--float64",), "run", {"action": "store_true"}),
        ),
        Knob(
            "enable_dump_tensor",
            0,
            "sim only: write dfx_outputs/tensor_dump/ (0 off, 1 tagged with dump_tag/dumps=, 2 every argument, "
            "3 metadata only)",
            _is_int(0, 3),
            "0..3",
            flag=Flag(
                ("--dump-tensor", "--dump-args"),
                "run",
                {"type": int, "nargs": "?", "const": 2, "choices": range(4), "metavar": "LEVEL"},
            ),
        ),
        Knob(
            "enable_dep_gen",
            False,
            "write the dependency graph (dfx_outputs/deps.json and deps_graph.html)",
            _is_bool,
            "a bool",
            flag=Flag(("--enable-dep-gen",), "run", {"action": "store_true"}),
        ),
        Knob(
            "enable_trace",
            False,
            "write a Chrome trace of the run (dfx_outputs/trace.json)",
            _is_bool,
            "a bool",
            flag=Flag(("--trace",), "run", {"action": "store_true"}),
        ),
        Knob(
            "enable_pmu",
            False,
            "sim only: per-task counters (wall and CPU time, page faults, context switches; cycles, "
            "instructions and cache misses where the machine exposes them) in dfx_outputs/pmu.csv and on "
            "trace.json's task slices; `tilescope trace` ranks kernels by time and by GB/s against the copy limit",
            _is_bool,
            "a bool",
            flag=Flag(("--enable-pmu",), "run", {"action": "store_true"}),
        ),
        Knob(
            "task_timeout_s",
            60.0,
            "sim only: CPU-time budget of one task (and of the orchestration between submissions): the "
            "CPU time its thread uses plus the time it is blocked (sleeping, waiting on a lock); time "
            "waiting for a core is not charged, so a loaded machine does not stop it; past the budget the "
            "run stops with a report of what was running and where; 0 = no budget",
            _is_seconds,
            f"a number of seconds in 0..{MAX_TASK_TIMEOUT_S:.0f} (a week; 0 = no budget)",
            flag=Flag(("--task-timeout",), "failures", {"type": float, "metavar": "SECONDS"}),
            kind=float,
        ),
        Knob(
            "max_tasks",
            MAX_TASKS,
            "the most tasks one run may submit (the task graph's memory grows with each): a loop that "
            "submits tasks and would run more times is refused before it starts, naming the loop and its "
            "bounds, and the submit past it fails the run; 0 = no cap",
            _is_int(0, 2**62),
            "an int >= 0 (0 = no cap)",
            flag=Flag(("--max-tasks",), "failures", {"type": int, "metavar": "N"}),
        ),
        Knob(
            "isolate",
            False,
            "sim only: run in a child process, so that a crashing kernel becomes a report (task, kernel, "
            "signal, C++ and DSL line, the task's inputs) and the caller goes on",
            _is_bool,
            "a bool",
            flag=Flag(("--isolate",), "failures", {"action": "BooleanOptionalAction"}),
        ),
        Knob(
            "nan_check",
            False,
            "sim only: check every task's outputs for NaN/Inf; report the tasks that make them from finite "
            "inputs and save their inputs for `tilescope replay --task`",
            _is_bool,
            "a bool",
            flag=Flag(("--nan-check",), "failures", {"action": "store_true"}),
        ),
        Knob(
            "probes",
            False,
            "sim only: keep the tile of every ts.probe a kernel runs, with its task and line, in the tensor "
            "dump (dfx_outputs/tensor_dump/, tilescope dump)",
            _is_bool,
            "a bool",
            flag=Flag(("--probes",), "failures", {"action": "store_true"}),
        ),
        Knob(
            "print_intermediates",
            0,
            "sim only: 1 save each task's inputs before and outputs after as .pt, 2 print their "
            "statistics, 3 print each task as it starts and finishes",
            _is_int(0, 3),
            "0..3",
            flag=Flag(
                ("--print-intermediates",),
                "failures",
                {"type": int, "choices": (1, 2, 3), "metavar": "{1,2,3}"},
            ),
        ),
        Knob(
            "kernel_filter",
            None,
            "restrict print_intermediates to these kernels (a list of names, or one comma-separated string)",
            _is_names,
            "a list of kernel names or a comma-separated string",
            flag=Flag(("--kernel-filter",), "failures", {"metavar": "A,B"}),
            kind=str,
        ),
        Knob(
            "serial",
            False,
            "sim only: one worker runs the tasks in submission order after the orchestration returned "
            "(deterministic, for bisecting schedule-dependent failures)",
            _is_bool,
            "a bool",
            flag=Flag(("--serial",), "failures", {"action": "store_true"}),
        ),
    )
}


# Settings read only from the environment (no cfg key): where things live and which compiler.
ENV_KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "cache_dir",
            None,
            "compiler cache and runtime core (default: ~/.cache/tilescope)",
            lambda v: isinstance(v, str),
            "a directory",
            kind=str,
        ),
        Knob(
            "log_dir",
            None,
            "also append every log message to <dir>/tilescope_<pid>.log",
            lambda v: isinstance(v, str),
            "a directory",
            kind=str,
        ),
        Knob(
            "cxx",
            None,
            "the C++ compiler (default: g++)",
            lambda v: isinstance(v, str),
            "a command",
            env="CXX",
            kind=str,
        ),
        Knob(
            "march",
            "native",
            "the instruction set kernels and the runtime core compile for (g++ -march=): native, the host's "
            "own, or a lower one such as x86-64-v3 (AVX2) to reproduce what a machine without AVX-512 computes",
            lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}", v) is not None,
            "a g++ -march value such as native, x86-64-v3 or skylake-avx512",
            kind=str,
        ),
        Knob(
            "debug_info",
            "lines",
            "debug information in compiled C++: lines (-g1: line tables and inlined frames, all that crash "
            "reports and backtraces use) or full (-g: locals and types too, for gdb; compiles ~1.5x slower)",
            lambda v: v in ("lines", "full"),
            "lines or full",
            kind=str,
        ),
        Knob(
            "triage_budget",
            60.0,
            "CPU seconds `tilescope triage` (and --triage, the MCP triage tools) spends before answering what it "
            "knows, when no --budget is given (its own CPU time: a loaded machine slows it, it does not use it up)",
            lambda v: isinstance(v, float) and 0 < v < float("inf"),
            "a number of seconds > 0",
            kind=float,
        ),
        Knob(
            "traceback",
            "short",
            "short: a tilescope error's traceback ends at the user's call; full: keep tilescope's own frames",
            lambda v: v in ("short", "full"),
            "short or full",
            kind=str,
        ),
    )
}


def env_setting(name: str) -> Any:
    """An environment-only setting (``ENV_KNOBS``): its value, or None when unset."""
    return ENV_KNOBS[name].value()


def all_knobs() -> dict[str, Knob]:
    """Every knob by name: compile, runtime and environment-only."""
    return {**COMPILE_KNOBS, **RUNTIME_KNOBS, **ENV_KNOBS}


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Set knobs for the calls made inside the block (this thread or task only); a value given
    to a call still wins. ``with knobs.override(enable_trace=True, nan_check=True): fn(x, y)``.

    Raises:
        ConfigError: an unknown knob, or a value its check refuses.
    """
    known = all_knobs()
    for name, value in values.items():
        if name not in known:
            raise ConfigError(f"knobs.override: unknown knob {name!r}; known: {', '.join(sorted(known))}")
        if value is not None and not known[name].check(value):
            raise ConfigError(f"knobs.override({name}={value!r}): expected {known[name].expect}")
    token = _overrides.set(MappingProxyType({**_overrides.get(), **values}))
    try:
        yield
    finally:
        _overrides.reset(token)


def _check_given(cfg: dict[str, Any], knobs: dict[str, Knob], what: str) -> None:
    unknown = sorted(set(cfg) - set(knobs))
    if unknown:
        raise ConfigError(
            f"unknown {what} key(s): {', '.join(unknown)}; known keys: {', '.join(sorted(knobs))}"
        )
    for name, value in cfg.items():
        if value is not None and not knobs[name].check(value):
            raise ConfigError(f"{what}[{name!r}] = {value!r}: expected {knobs[name].expect}")


def check_compile_cfg(cfg: dict[str, Any]) -> None:
    """ConfigError for an unknown compile_cfg key or a given value of the wrong kind (the
    environment and overrides are not read: what ``@ts.jit(...)`` checks when it decorates)."""
    _check_given(cfg, COMPILE_KNOBS, "compile_cfg")


def _validate(cfg: dict[str, Any] | None, knobs: dict[str, Knob], what: str) -> dict[str, Any]:
    cfg = dict(cfg or {})
    _check_given(cfg, knobs, what)
    out = {}
    overrides = _overrides.get()
    for name, knob in knobs.items():
        value = cfg.get(name)
        if value is None:
            value = overrides.get(name)
        if value is None:
            value = knob.env_value()
        out[name] = knob.default if value is None else value
    return out


def compile_options(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Validated compile options with defaults filled in."""
    return _validate(cfg, COMPILE_KNOBS, "compile_cfg")


def runtime_settings() -> tuple:
    """What ``runtime_options`` reads besides its argument, as one hashable value: the
    ``override`` block in effect and the runtime knobs' environment variables. Two calls give
    equal values exactly when ``runtime_options`` of the same argument would give the same
    options (what a cache of validated options is keyed by)."""
    overrides = _overrides.get()
    data = _env_store()
    if data is not None:
        env = tuple(map(data.get, _RUNTIME_ENV_KEYS))
    else:
        env = tuple(os.environ.get(var) for var in _RUNTIME_ENV_VARS)
    return (freeze(dict(overrides)) if overrides else ()), env


def _env_store() -> dict[bytes, bytes] | None:
    """os.environ's own store on POSIX (bytes names and values, what os.environ reads and writes),
    else None: one lookup per variable there, where os.environ.get encodes and decodes (20x the
    time, on the path of every run of a compiled program)."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) and os.name == "posix" else None


def overridden(name: str) -> bool:
    """Whether an ``override`` block in effect sets the knob ``name``."""
    return name in _overrides.get()


def env_is_set(var: str) -> bool:
    """Whether the environment variable ``var`` is set to something other than "" (read as
    ``runtime_settings`` reads the environment: this is asked on every run of a compiled program)."""
    data = _env_store()
    if data is not None:
        key = _ENV_KEYS.get(var)
        if key is None:
            key = _ENV_KEYS[var] = os.fsencode(var)
        return bool(data.get(key))
    return bool(os.environ.get(var))


_ENV_KEYS: dict[str, bytes] = {}  # env_is_set's names, encoded once


def runtime_options(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Validated runtime options with defaults filled in (a fresh dict on every call; the
    environment is read on every call)."""
    return _validate(cfg, RUNTIME_KNOBS, "runtime_cfg")


def freeze(cfg: dict[str, Any]) -> tuple:
    """A hashable, order-independent form of an options dict."""
    return tuple(sorted((k, repr(v)) for k, v in cfg.items()))


_RUNTIME_ENV_VARS = tuple(k.env_var for k in RUNTIME_KNOBS.values() if k.env_var)
_RUNTIME_ENV_KEYS = tuple(os.fsencode(var) for var in _RUNTIME_ENV_VARS)
