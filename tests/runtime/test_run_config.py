"""``RunConfig``: run options validated once, frozen, carried as JSON to an isolated child, and the
one source of the core's ``ts_run_config``."""

import ctypes
import dataclasses

import pytest

from tilescope import knobs
from tilescope.errors import ConfigError
from tilescope.runtime import run_config
from tilescope.runtime.abi import TsGuardZone
from tilescope.runtime.run_config import Recording, RunConfig, core_config


def test_keywords_the_overrides_and_the_environment_fill_it_in_that_order(monkeypatch):
    monkeypatch.setenv("TILESCOPE_NUM_WORKERS", "3")
    monkeypatch.setenv("TILESCOPE_NAN_CHECK", "yes")
    assert RunConfig.from_keywords({}).num_workers == 3
    with knobs.override(num_workers=2):
        assert RunConfig.from_keywords({}).num_workers == 2
        config = RunConfig.from_keywords({"num_workers": 1, "serial": 1, "kernel_filter": "a, b", "print_intermediates": 2})
    assert (config.num_workers, config.nan_check, config.serial) == (1, True, True)
    assert config.kernel_filter == ("a", "b") and config.task_timeout_s == 60.0
    assert type(config.serial) is bool and type(config.task_timeout_s) is float  # 1 given: a bool kept


def test_a_config_built_directly_has_the_knobs_defaults():
    defaults = {n: k.default for n, k in knobs.RUNTIME_KNOBS.items()}
    config = RunConfig()
    assert {n: getattr(config, n) for n in defaults} == defaults
    assert (config.crash_report, config.poison, config.shuffle_seed, config.dump_arena_bytes) == (None,) * 4


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"workers": 2}, r"unknown runtime_cfg key\(s\): workers; known keys: .*num_workers"),
        ({"num_workers": -1}, r"runtime_cfg\['num_workers'\] = -1: expected an int in 0\.\.1024 "),
        ({"enable_dump_tensor": 5}, r"runtime_cfg\['enable_dump_tensor'\] = 5: expected 0\.\.3"),
        (
            {"platform": "interp", "nan_check": True, "serial": True},
            r"runtime_cfg 'nan_check', 'serial': implemented on the sim platform only; run with platform='sim'",
        ),
        (
            {"platform": "interp", "enable_dump_tensor": 2},
            r"runtime_cfg 'enable_dump_tensor': implemented on the sim platform only; run with platform='sim'",
        ),
        (
            {"float64": True},
            r"runtime_cfg\['float64'\] applies to the interp platform only: run with platform='interp', or drop float64",
        ),
        (
            {"print_intermediates": 1, "enable_dump_tensor": 1},
            r"print_intermediates=1 records .* cannot be combined with enable_dump_tensor=1: drop one of them",
        ),
        (
            {"kernel_filter": "add"},
            r"kernel_filter 'add' limits print_intermediates .* so it would do nothing: add print_intermediates=N",
        ),
    ],
)
def test_an_invalid_option_names_it_what_it_expects_and_what_to_do(given, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_keywords(given)


def test_an_invalid_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("TILESCOPE_TASK_TIMEOUT_S", "soon")
    with pytest.raises(ConfigError, match=r"TILESCOPE_TASK_TIMEOUT_S='soon' \(task_timeout_s\): expected a number"):
        RunConfig.from_keywords({})


def test_a_sim_only_knob_set_by_the_environment_does_not_stop_an_interp_run(monkeypatch):
    monkeypatch.setenv("TILESCOPE_ISOLATE", "1")
    config = RunConfig.from_keywords({"platform": "interp"})
    assert (config.platform, config.isolate) == ("interp", True)


def test_it_is_frozen_and_replace_makes_a_changed_copy():
    config = RunConfig.from_keywords({"num_workers": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_workers = 3  # type: ignore[misc]
    changed = config.replace(poison=0xA5, crash_report="/tmp/crash.txt")
    assert (config.poison, changed.poison, changed.crash_report, changed.num_workers) == (None, 0xA5, "/tmp/crash.txt", 2)
    assert hash(changed) != hash(config)


def test_json_round_trip():
    config = RunConfig.from_keywords(
        {"num_workers": 3, "kernel_filter": ["add", "mul"], "print_intermediates": 2, "log_level": "error"}
    ).replace(shuffle_seed=7, dump_arena_bytes=1 << 20)
    data = config.to_json()
    assert data["kernel_filter"] == ["add", "mul"] and data["shuffle_seed"] == 7
    assert RunConfig.from_json(data) == config
    assert RunConfig.from_json(RunConfig().to_json()) == RunConfig()
    with pytest.raises(ConfigError, match=r"missing: serial, unknown: serially"):
        RunConfig.from_json({**{k: v for k, v in data.items() if k != "serial"}, "serially": True})


def test_the_core_struct_comes_from_the_config_and_the_recording(monkeypatch):
    config = RunConfig(task_timeout_s=2.5, serial=True, crash_report="/tmp/c.txt", poison=0x1A5)
    recording = Recording(record_edges=True, dump_level=2, print_intermediates=3, nan_check=True, probes=True, pmu=True)
    zone = TsGuardZone()
    core = core_config(config, recording, kernel_filter=(True, False, True), worker_stack_mib=12, guard_zones=[zone])
    assert (core.num_workers, core.record_edges, core.record_task_times, core.dump_level) == (0, 1, 0, 2)
    assert (core.task_timeout_s, core.serial, core.nan_check, core.print_intermediates) == (2.5, 1, 1, 3)
    assert (core.probes, core.pmu, core.worker_stack_mib) == (1, 1, 12)
    assert core.poison == 0x1A5 and core.shuffle_seed == 0  # the poison byte, flagged as set
    shuffled = core_config(RunConfig(num_workers=3, shuffle_seed=9), recording, kernel_filter=None, worker_stack_mib=0,
                           guard_zones=[])  # fmt: skip
    assert (shuffled.shuffle_seed, shuffled.serial) == (9, 0)
    assert core.crash_report_path == b"/tmp/c.txt"
    assert list((ctypes.c_uint8 * 3).from_address(core.kernel_filter)) == [1, 0, 1]
    assert core.num_guard_zones == 1 and bool(core.guard_zones)
    assert core.dump_arena_bytes == run_config.DUMP_ARENA_BYTES and core.dump_max_records == run_config.DUMP_MAX_RECORDS
    plain = core_config(RunConfig(), Recording(), kernel_filter=None, worker_stack_mib=0, guard_zones=[])
    assert (plain.poison, plain.shuffle_seed, plain.kernel_filter, plain.crash_report_path) == (0, 0, None, None)
    assert (plain.num_guard_zones, bool(plain.guard_zones), plain.task_timeout_s) == (0, False, 60.0)
    monkeypatch.setattr(run_config, "DUMP_ARENA_BYTES", 4096)
    assert core_config(RunConfig(), Recording(), kernel_filter=None, worker_stack_mib=0, guard_zones=[]).dump_arena_bytes == 4096
    sized = RunConfig(dump_arena_bytes=1 << 20)
    assert core_config(sized, Recording(), kernel_filter=None, worker_stack_mib=0, guard_zones=[]).dump_arena_bytes == 1 << 20


def test_an_analysis_run_takes_its_own_schedule_and_instruments_whatever_the_environment(monkeypatch):
    for var, raw in (("SERIAL", "1"), ("NUM_WORKERS", "3"), ("ENABLE_TRACE", "1"), ("PRINT_INTERMEDIATES", "2"),
                     ("PLATFORM", "interp"), ("TASK_TIMEOUT_S", "7.5")):  # fmt: skip
        monkeypatch.setenv(f"TILESCOPE_{var}", raw)
    config = RunConfig.for_analysis(num_workers=2, shuffle_seed=9, log_level="error")
    assert config == RunConfig(num_workers=2, shuffle_seed=9, log_level="error", task_timeout_s=7.5)
    assert RunConfig.for_analysis(serial=True).serial and not RunConfig.for_analysis().serial
    monkeypatch.setenv("TILESCOPE_NUM_WORKERS", "-2")  # a bad value is still named, before anything runs
    with pytest.raises(ConfigError, match=r"^environment variable TILESCOPE_NUM_WORKERS='-2' \(num_workers\)"):
        RunConfig.for_analysis(serial=True)


def test_validated_options_are_reused_only_while_keywords_overrides_and_environment_agree(monkeypatch):
    monkeypatch.delenv("TILESCOPE_PLATFORM", raising=False)
    first = RunConfig.from_keywords({"num_workers": 2})
    assert RunConfig.from_keywords({"num_workers": 2}) is first  # a program run in a loop validates once
    assert RunConfig.from_keywords({"num_workers": 3}).num_workers == 3
    monkeypatch.setenv("TILESCOPE_PLATFORM", "interp")
    assert RunConfig.from_keywords({"num_workers": 2}).platform == "interp"
    monkeypatch.setenv("TILESCOPE_PLATFORM", "bogus")
    for _ in range(2):  # an environment it refuses is refused every time, never remembered
        with pytest.raises(ConfigError, match="TILESCOPE_PLATFORM='bogus'"):
            RunConfig.from_keywords({"num_workers": 2})
    monkeypatch.delenv("TILESCOPE_PLATFORM")
    assert RunConfig.from_keywords({"num_workers": 2}) is first
    with knobs.override(platform="interp"):
        assert RunConfig.from_keywords({"num_workers": 2}).platform == "interp"
    assert RunConfig.from_keywords({"num_workers": 2}).platform == "sim"
