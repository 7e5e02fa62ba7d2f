"""What one run is asked to do: ``RunConfig`` (every run option, validated once), ``Recording``
(what the runtime core records for it) and ``core_config``, where the two become the core's
``ts_run_config``.

Invariants:
- ``RunConfig.from_keywords`` is the one place run options are validated: the call's keywords,
  then ``knobs.override`` blocks, then the environment, then the defaults (``knobs``), and the
  combinations of options, each error naming the option, what it expects and what to do. A
  ``RunConfig`` is frozen: it travels unchanged from the call to ``launch`` (``replace`` makes
  a changed copy) and through ``request.json`` to an isolated child (``to_json``/``from_json``).
- The fields tilescope sets itself (``crash_report``, ``poison``, ``shuffle_seed``,
  ``dump_arena_bytes``) are never run keywords: the analyses and the run path set them. An
  analysis's own runs start from ``RunConfig.for_analysis``, so the environment's schedule and
  instruments (``TILESCOPE_SERIAL``, ``TILESCOPE_NUM_WORKERS``, ...) never change what it runs.
- A shuffled run is never serial: a RunConfig asking for both is a ConfigError, however made.
- ``core_config`` builds ``TsRunConfig`` by keyword, from a RunConfig and a Recording only; no
  other code makes one for a run.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tilescope import knobs
from tilescope.errors import ConfigError
from tilescope.runtime.abi import TsGuardZone, TsRunConfig

# run keywords only the sim platform implements (a truthy value given to an interp run is an error)
SIM_ONLY = ("isolate", "nan_check", "print_intermediates", "serial", "kernel_filter", "probes", "enable_pmu")
DUMP_ARENA_BYTES = 64 << 20  # tensor dump payload ring per worker (levels 1 and 2)
DUMP_MAX_RECORDS = 1 << 20  # tensor dump records kept per worker; later ones are dropped (and counted)

_DEFAULT = {name: knob.default for name, knob in knobs.RUNTIME_KNOBS.items()}


@dataclass(frozen=True)
class RunConfig:
    """Every option of one run, validated (``from_keywords``); the knobs' defaults when built
    directly. The first fields are the run keywords (``knobs.RUNTIME_KNOBS``, the same names)."""

    platform: str = _DEFAULT["platform"]
    device_id: int = _DEFAULT["device_id"]
    num_workers: int = _DEFAULT["num_workers"]  # 0: one per CPU
    log_level: str | None = _DEFAULT["log_level"]
    float64: bool = _DEFAULT["float64"]
    enable_dump_tensor: int = _DEFAULT["enable_dump_tensor"]
    enable_dep_gen: bool = _DEFAULT["enable_dep_gen"]
    enable_trace: bool = _DEFAULT["enable_trace"]
    enable_pmu: bool = _DEFAULT["enable_pmu"]
    task_timeout_s: float = _DEFAULT["task_timeout_s"]  # 0: no budget
    max_tasks: int = _DEFAULT["max_tasks"]  # 0: no cap
    isolate: bool = _DEFAULT["isolate"]
    nan_check: bool = _DEFAULT["nan_check"]
    probes: bool = _DEFAULT["probes"]
    print_intermediates: int = _DEFAULT["print_intermediates"]
    kernel_filter: tuple[str, ...] | None = None  # kernel names (None: every kernel)
    serial: bool = _DEFAULT["serial"]
    # set by tilescope, not by a keyword:
    crash_report: str | None = None  # where a crashing kernel writes its report (None: nowhere)
    poison: int | None = None  # intermediates start with every byte this value (None: zero-filled)
    shuffle_seed: int | None = None  # a randomized schedule from this seed (None: the usual one)
    dump_arena_bytes: int | None = None  # the tensor dump's payload ring per worker (None: DUMP_ARENA_BYTES)

    def __post_init__(self) -> None:
        if self.serial and self.shuffle_seed:
            raise ConfigError(
                f"a shuffled run (shuffle_seed={self.shuffle_seed}) cannot be serial: shuffling reorders what serial "
                "runs in submission order; set serial=False for the shuffled runs (TILESCOPE_SERIAL applies to a "
                "program's own runs, not to an analysis's)"
            )

    @classmethod
    def for_analysis(cls, **fields: Any) -> RunConfig:
        """The options of a run an analysis makes for itself (localize's and triage's runs, the access
        audit, poison and shuffled runs): ``fields``, and the knobs' defaults for the rest. The
        schedule (``serial``, ``num_workers``), the platform and the instruments that the environment
        or an ``override`` block set are for the program's own runs, never an analysis's: its runs
        are what it reasons about. Only ``task_timeout_s`` and ``max_tasks`` are read as ``from_keywords`` reads them.

        Raises:
            ConfigError: the environment sets a run knob to a value it refuses (each is checked).
        """
        opts = knobs.runtime_options(None)
        return cls(**{"task_timeout_s": float(opts["task_timeout_s"]), "max_tasks": int(opts["max_tasks"]), **fields})

    @classmethod
    def from_keywords(cls, cfg: Mapping[str, Any] | None = None) -> RunConfig:
        """The run keywords ``cfg`` (``runtime_cfg``), validated, with the overrides, the
        environment and the defaults filled in.

        Raises:
            ConfigError: an unknown keyword (the known ones are listed), a value its knob refuses
                (a given one or an environment variable's, named), or options that cannot be
                combined.
        """
        given = dict(cfg or {})
        key = (cls, knobs.freeze(given), knobs.runtime_settings())
        known = _VALIDATED.get(key)
        if known is not None:
            return known
        config = cls._validated(given)
        with _VALIDATED_LOCK:
            if len(_VALIDATED) >= _VALIDATED_MAX:
                _VALIDATED.pop(next(iter(_VALIDATED)))  # the oldest
            _VALIDATED[key] = config
        return config

    @classmethod
    def _validated(cls, given: dict[str, Any]) -> RunConfig:
        opts = knobs.runtime_options(given)
        names = knobs.kernel_names(opts["kernel_filter"])
        config = cls(
            platform=opts["platform"],
            device_id=int(opts["device_id"]),
            num_workers=int(opts["num_workers"]),
            log_level=opts["log_level"],
            float64=bool(opts["float64"]),
            enable_dump_tensor=int(opts["enable_dump_tensor"]),
            enable_dep_gen=bool(opts["enable_dep_gen"]),
            enable_trace=bool(opts["enable_trace"]),
            enable_pmu=bool(opts["enable_pmu"]),
            task_timeout_s=float(opts["task_timeout_s"]),
            max_tasks=int(opts["max_tasks"]),
            isolate=bool(opts["isolate"]),
            nan_check=bool(opts["nan_check"]),
            probes=bool(opts["probes"]),
            print_intermediates=int(opts["print_intermediates"]),
            kernel_filter=None if names is None else tuple(names),
            serial=bool(opts["serial"]),
        )
        config._check_combination([k for k in SIM_ONLY if given.get(k)])
        return config

    def _check_combination(self, sim_only_given: list[str]) -> None:
        """ConfigError for options that do not go together on this platform."""
        if self.platform == "interp":
            sim_only = (["enable_dump_tensor"] if self.enable_dump_tensor else []) + sim_only_given
            if sim_only:
                raise ConfigError(
                    f"runtime_cfg {', '.join(repr(k) for k in sim_only)}: implemented on the sim platform only; "
                    "run with platform='sim'"
                )
            return
        if self.float64:
            raise ConfigError(
                "runtime_cfg['float64'] applies to the interp platform only: run with platform='interp', "
                "or drop float64"
            )
        printing, dump_level = self.print_intermediates, self.enable_dump_tensor
        if printing in (1, 2) and dump_level not in (0, 2):
            raise ConfigError(
                f"print_intermediates={printing} records every task's arguments (a level-2 dump); it "
                f"cannot be combined with enable_dump_tensor={dump_level}: drop one of them"
            )
        if self.kernel_filter and not printing and dump_level not in (2, 3):
            raise ConfigError(
                f"kernel_filter {','.join(self.kernel_filter)!r} limits print_intermediates (or a level-2 or level-3 "
                "tensor dump) to those kernels, and neither is on, so it would do nothing: add print_intermediates=N "
                "(--print-intermediates N) or enable_dump_tensor=2 (--dump-tensor 2), or drop kernel_filter"
            )

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (field names of this class)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Every field as JSON data (``from_json`` reads it back equal)."""
        data = dataclasses.asdict(self)
        data["kernel_filter"] = None if self.kernel_filter is None else list(self.kernel_filter)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        """The RunConfig ``to_json`` wrote.

        Raises:
            ConfigError: ``data`` lacks a field or has one this class does not know.
        """
        known = {f.name for f in fields(cls)}
        if set(data) != known:
            raise ConfigError(
                f"a run config in JSON must have the fields {', '.join(sorted(known))}; missing: "
                f"{', '.join(sorted(known - set(data))) or 'none'}, unknown: {', '.join(sorted(set(data) - known)) or 'none'}"
            )
        names = data["kernel_filter"]
        return cls(**{**data, "kernel_filter": None if names is None else tuple(names)})


# NOTE: a program run in a loop validates the same keywords in the same environment on every
# call; the RunConfig is frozen, so one validated is handed out again (keyed by everything the
# validation reads: the keywords, the override block and the knobs' environment variables)
_VALIDATED: dict[tuple, RunConfig] = {}
_VALIDATED_MAX = 64
_VALIDATED_LOCK = threading.Lock()


@dataclass(frozen=True)
class Recording:
    """What the runtime core records during a run (see ``ts_run_config``)."""

    record_edges: bool = False  # dependency edges, task arguments and buffers
    record_task_times: bool = False  # per-task times and names (enable_trace, enable_dep_gen)
    dump_level: int = 0  # tensor dump: 1 tagged, 2 every argument, 3 metadata only
    print_intermediates: int = 0  # its level; at 3 the core prints a stderr line per task start and finish
    nan_check: bool = False  # scan Out/InOut regions for NaN/Inf after each task
    probes: bool = False  # keep the tile of every ts.probe a kernel runs (dump records of stage "probe")
    pmu: bool = False  # per-task counters around every kernel (enable_pmu)

    def merge(self, other: Recording) -> Recording:
        """Both recordings at once; two different dump levels cannot be combined."""
        if self.dump_level and other.dump_level and self.dump_level != other.dump_level:
            raise ConfigError(
                f"a level-{self.dump_level} and a level-{other.dump_level} tensor dump cannot be recorded in "
                "one run (print_intermediates 1 and 2 record a level-2 dump): drop one of the options"
            )
        merged = {f.name: getattr(self, f.name) or getattr(other, f.name) for f in fields(self)}
        merged["dump_level"] = self.dump_level or other.dump_level
        return Recording(**merged)


NO_RECORDING = Recording()  # a run that records nothing


def core_config(
    config: RunConfig,
    recording: Recording,
    *,
    kernel_filter: tuple[bool, ...] | None,
    worker_stack_mib: int,
    guard_zones: list[TsGuardZone],
) -> TsRunConfig:
    """The core's ``ts_run_config`` of a run: ``config``'s options and ``recording``'s records,
    with one filter flag per func_id (None: every kernel), the workers' stack size (MiB; 0: the
    default) and the guard zones of the arguments. The struct keeps the C arrays it points to
    alive; the core only reads it, so without guard zones (which name a run's own arguments) one
    struct serves every run with the same options."""
    limits = (DUMP_ARENA_BYTES, DUMP_MAX_RECORDS)
    if guard_zones:
        return _core_config(config, recording, kernel_filter, worker_stack_mib, guard_zones, limits)
    # NOTE: a program run in a loop passes the same two objects each time: one comparison by
    # identity, where the cache below hashes every field of both
    global _last_shared
    last = _last_shared
    if (last is not None and last[0] is config and last[1] is recording and last[2] == kernel_filter
            and last[3] == worker_stack_mib and last[4] == limits):  # fmt: skip
        return last[5]
    core = _shared_core_config(config, recording, kernel_filter, worker_stack_mib, limits)
    _last_shared = (config, recording, kernel_filter, worker_stack_mib, limits, core)
    return core


_last_shared: tuple | None = None  # core_config's last shared struct, with what it was made of


@functools.lru_cache(maxsize=64)
def _shared_core_config(config: RunConfig, recording: Recording, kernel_filter: tuple[bool, ...] | None,
                        worker_stack_mib: int, limits: tuple[int, int]) -> TsRunConfig:  # fmt: skip
    return _core_config(config, recording, kernel_filter, worker_stack_mib, [], limits)


def _core_config(config: RunConfig, recording: Recording, kernel_filter: tuple[bool, ...] | None,
                 worker_stack_mib: int, guard_zones: list[TsGuardZone], limits: tuple[int, int]) -> TsRunConfig:  # fmt: skip
    arena, max_records = limits
    flags = None if kernel_filter is None else (ctypes.c_uint8 * len(kernel_filter))(*map(bool, kernel_filter))
    zones = (TsGuardZone * len(guard_zones))(*guard_zones) if guard_zones else None
    numbers = dict(
        num_workers=0,  # the runtime's own count
        record_edges=int(recording.record_edges),
        record_task_times=int(recording.record_task_times),
        dump_level=recording.dump_level,
        dump_arena_bytes=arena if config.dump_arena_bytes is None else config.dump_arena_bytes,
        dump_max_records=max_records,
        task_timeout_s=float(config.task_timeout_s),
        max_tasks=int(config.max_tasks),
        serial=int(config.serial),
        nan_check=int(recording.nan_check),
        print_intermediates=recording.print_intermediates,
        worker_stack_mib=worker_stack_mib,
        num_guard_zones=len(guard_zones),
        probes=int(recording.probes),
        poison=0 if config.poison is None else 0x100 | (config.poison & 0xFF),
        shuffle_seed=config.shuffle_seed or 0,
        pmu=int(recording.pmu),
    )
    core = TsRunConfig(
        **numbers,
        kernel_filter=ctypes.cast(flags, ctypes.c_void_p) if flags is not None else None,
        # NOTE: resolved, once per struct: the crash handler then refuses a link found in its place
        crash_report_path=os.fsencode(os.path.realpath(config.crash_report)) if config.crash_report else None,
        guard_zones=zones,
    )
    # NOTE: ctypes cuts an integer that does not fit its field without a word (2**43 MiB of stack became 0)
    cut = [f"{name}={value}" for name, value in numbers.items() if getattr(core, name) != value]
    if cut:
        raise ConfigError(f"{', '.join(cut)}: too large for the runtime core's ts_run_config (a value past what its "
                          "field holds); use a smaller value")  # fmt: skip
    return core


__all__ = ["DUMP_ARENA_BYTES", "DUMP_MAX_RECORDS", "NO_RECORDING", "SIM_ONLY", "Recording", "RunConfig", "core_config"]
