"""One typed registry of every compile and runtime option.

Invariants: ``compile_cfg`` and ``runtime_cfg`` accept only registered keys; an unknown key is
a ConfigError listing the known ones. A value from a knob's environment variable is
checked like a given one: ``compile_options`` / ``runtime_options`` raise a ConfigError that
names the variable (so ``run_jit`` reports it as a failed run); ``Knob.value`` alone never
raises and ignores an invalid environment value.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tilescope.errors import ConfigError

LOG_LEVELS = ("debug", *(f"v{i}" for i in range(10)), "info", "warn", "error", "null")
PLATFORMS = ("sim", "interp")


@dataclass(frozen=True)
class Knob:
    name: str
    default: Any
    help: str
    check: Callable[[Any], bool] = lambda v: True
    expect: str = ""
    env: str | None = None

    def env_value(self) -> Any:
        """The value set by the knob's environment variable, or None when it is unset; a
        ConfigError naming the variable when it is invalid."""
        raw = os.environ.get(self.env) if self.env else None
        if not raw:
            return None
        try:
            v = type(self.default)(raw) if self.default is not None else raw
        except ValueError:
            v = None
        if v is None or not self.check(v):
            raise ConfigError(
                f"environment variable {self.env}={raw!r} ({self.name}): expected {self.expect}"
            )
        return v

    def value(self, given: Any = None) -> Any:
        """``given``, else the environment's value, else the default. Never raises: an invalid
        environment value counts as unset here and is reported by ``_validate``."""
        if given is not None:
            return given
        try:
            v = self.env_value()
        except ConfigError:
            v = None
        return self.default if v is None else v


def _is_int(lo: int, hi: int | None = None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool) or v in (0, 1)


def _is_seconds(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 and v == v


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
            "dump_passes", False, "write passes_dump/NN_after_<Pass>.py after every pass", _is_bool, "a bool"
        ),
        Knob(
            "local_memory_bytes",
            256 * 1024,
            "per-core local memory capacity: a kernel whose live tiles exceed it is a compile error",
            _is_int(1),
            "a positive int (bytes)",
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
            "check_bounds",
            False,
            "checked build: every tile load/store and dynamic index checks its bounds at run time and "
            "reports the kernel, op, DSL line, index, shape and task on a violation",
            _is_bool,
            "a bool",
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
        ),
        Knob("device_id", 0, "device index (sim and interp have one device, 0)", _is_int(0, 0), "0"),
        Knob("num_workers", 0, "worker threads running tasks; 0 = one per CPU", _is_int(0), "an int >= 0"),
        Knob(
            "log_level",
            None,
            "log level: debug, v0..v9 (v0 most verbose, v5 = info), info, warn, error, null",
            LOG_LEVELS.__contains__,
            f"one of {', '.join(LOG_LEVELS)}",
            env="TILESCOPE_LOG_LEVEL",
        ),
        Knob(
            "float64",
            False,
            "interp only: compute every float op in float64 (a reference for precision work)",
            _is_bool,
            "a bool",
        ),
        Knob(
            "enable_dump_tensor",
            0,
            "sim only: write dfx_outputs/tensor_dump/ (0 off, 1 tagged with dump_tag/dumps=, 2 every argument, "
            "3 metadata only)",
            _is_int(0, 3),
            "0..3",
        ),
        Knob(
            "enable_dep_gen",
            False,
            "write dfx_outputs/deps.json and deps_graph.html",
            _is_bool,
            "a bool",
        ),
        Knob("enable_trace", False, "write dfx_outputs/trace.json", _is_bool, "a bool"),
        Knob(
            "task_timeout_s",
            60.0,
            "sim only: wall-clock budget of one task (and of the orchestration between submissions); "
            "past it the run stops with a report of what was running and where; 0 = no budget",
            _is_seconds,
            "a number of seconds >= 0",
            env="TILESCOPE_TASK_TIMEOUT_S",
        ),
        Knob(
            "isolate",
            False,
            "sim only: run in a child process, so that a crashing kernel becomes a report (task, kernel, "
            "signal, C++ and DSL line, the task's inputs) and the caller goes on",
            _is_bool,
            "a bool",
        ),
        Knob(
            "nan_check",
            False,
            "sim only: check every task's outputs for NaN/Inf; report the first task that makes them from "
            "finite inputs and save its inputs for `tilescope replay --task`",
            _is_bool,
            "a bool",
        ),
        Knob(
            "print_intermediates",
            0,
            "sim only: 1 save each task's inputs before and outputs after as .pt, 2 print their "
            "statistics, 3 print each task as it starts and finishes",
            _is_int(0, 3),
            "0..3",
        ),
        Knob(
            "kernel_filter",
            None,
            "restrict print_intermediates to these kernels (a list of names, or one comma-separated string)",
            _is_names,
            "a list of kernel names or a comma-separated string",
        ),
        Knob(
            "serial",
            False,
            "sim only: one worker runs the tasks in submission order after the orchestration returned "
            "(deterministic, for bisecting schedule-dependent failures)",
            _is_bool,
            "a bool",
        ),
    )
}


def _validate(cfg: dict[str, Any] | None, knobs: dict[str, Knob], what: str) -> dict[str, Any]:
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(knobs))
    if unknown:
        raise ConfigError(
            f"unknown {what} key(s): {', '.join(unknown)}; known keys: {', '.join(sorted(knobs))}"
        )
    out = {}
    for name, knob in knobs.items():
        value = cfg.get(name)
        if value is not None and not knob.check(value):
            raise ConfigError(f"{what}[{name!r}] = {value!r}: expected {knob.expect}")
        if value is None:
            value = knob.env_value()
        out[name] = knob.default if value is None else value
    return out


def compile_options(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Validated compile options with defaults filled in."""
    return _validate(cfg, COMPILE_KNOBS, "compile_cfg")


def runtime_options(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Validated runtime options with defaults filled in."""
    return _validate(cfg, RUNTIME_KNOBS, "runtime_cfg")


def freeze(cfg: dict[str, Any]) -> tuple:
    """A hashable, order-independent form of an options dict."""
    return tuple(sorted((k, repr(v)) for k, v in cfg.items()))
