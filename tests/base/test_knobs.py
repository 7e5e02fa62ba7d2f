"""The knob registry: environment parsing, override blocks, and the CLI flags generated from it."""

import argparse

import pytest
import torch

from tilescope import knobs
from tilescope.errors import ConfigError
from tilescope.harness import add_harness_args, harness_kwargs
from tilescope.harness.flags import add_runtime_args, runtime_cfg_from_args

import vector_dag


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("0", False), ("1", True), ("false", False), ("True", True), ("off", False), ("yes", True)],
)
def test_bool_knobs_parse_the_environment(monkeypatch, raw, expected):
    monkeypatch.setenv("TILESCOPE_NAN_CHECK", raw)
    assert knobs.runtime_options({})["nan_check"] is expected


def test_a_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("TILESCOPE_ENABLE_TRACE", "maybe")
    with pytest.raises(
        ConfigError, match=r"TILESCOPE_ENABLE_TRACE='maybe' \(enable_trace\): expected a bool"
    ):
        knobs.runtime_options({})
    monkeypatch.setenv("TILESCOPE_TASK_TIMEOUT_S", "soon")
    monkeypatch.delenv("TILESCOPE_ENABLE_TRACE")
    with pytest.raises(ConfigError, match=r"TILESCOPE_TASK_TIMEOUT_S='soon'.*seconds"):
        knobs.runtime_options({})


def test_override_blocks_sit_between_the_call_and_the_environment(monkeypatch):
    monkeypatch.setenv("TILESCOPE_NUM_WORKERS", "3")
    assert knobs.runtime_options({})["num_workers"] == 3
    with knobs.override(num_workers=1, enable_trace=True):
        opts = knobs.runtime_options({})
        assert (opts["num_workers"], opts["enable_trace"]) == (1, True)
        assert knobs.runtime_options({"num_workers": 2})["num_workers"] == 2
        with knobs.override(num_workers=4):
            assert knobs.runtime_options({})["num_workers"] == 4
        assert knobs.runtime_options({})["num_workers"] == 1
    assert knobs.runtime_options({})["num_workers"] == 3
    with pytest.raises(ConfigError, match="unknown knob 'num_worker'"), knobs.override(num_worker=1):
        pass
    with (
        pytest.raises(ConfigError, match=r"override\(num_workers=-1\): expected an int in 0\.\.1024 "),
        knobs.override(num_workers=-1),
    ):
        pass


def test_environment_only_settings_go_through_the_registry(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "clang++-99")
    assert knobs.env_setting("cxx") == "clang++-99"
    monkeypatch.setenv("TILESCOPE_LOG_DIR", str(tmp_path))
    assert knobs.env_setting("log_dir") == str(tmp_path)
    from tilescope.errors import ToolchainError
    from tilescope.toolchain import compiler

    with pytest.raises(ToolchainError, match=r"CXX is set to 'clang\+\+-99'"):
        compiler.find_cxx()


def test_every_flag_is_generated_from_its_knob():
    parser = add_harness_args(argparse.ArgumentParser())
    by_dest = {a.dest: a for a in parser._actions}
    for knob in {**knobs.RUNTIME_KNOBS, **knobs.COMPILE_KNOBS}.values():
        if knob.flag is None:
            continue
        action = by_dest[knob.name]
        assert tuple(action.option_strings[: len(knob.flag.names)]) == knob.flag.names
        assert action.help.startswith(knob.help.replace("%", "%%"))
    # the flags users know keep their spellings
    for flag in (
        "-p",
        "--dump-tensor",
        "--dump-args",
        "--enable-dep-gen",
        "--trace",
        "--nan-check",
        "--check-bounds",
    ):
        assert flag in parser._option_string_actions


def test_flags_map_to_knobs_and_unset_flags_stay_unset():
    parser = add_harness_args(argparse.ArgumentParser())
    kw = harness_kwargs(
        parser.parse_args(["-p", "interp", "--dump-tensor", "--no-isolate", "--check-bounds"])
    )
    assert kw["runtime_cfg"] == {"platform": "interp", "enable_dump_tensor": 2, "isolate": False}
    assert kw["compile_cfg"] == {"check_bounds": True}
    assert runtime_cfg_from_args(add_runtime_args(argparse.ArgumentParser()).parse_args([])) == {}


@pytest.mark.slow
def test_an_override_block_turns_an_instrument_on_for_a_call(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(tmp_path / "builds"))
    prog = vector_dag.vector_dag.compile()
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    out = torch.zeros(64, 128)
    with knobs.override(enable_dep_gen=True):
        prog.run(x, y, out)
    assert (prog.work_dir / "dfx_outputs" / "deps.json").is_file()


def test_a_repeated_configuration_is_validated_again_when_anything_it_depends_on_changes(monkeypatch):
    monkeypatch.delenv("TILESCOPE_NAN_CHECK", raising=False)
    first = knobs.runtime_options({"num_workers": 2})
    first["num_workers"] = 99  # the caller's own dict: a later call is not affected
    assert knobs.runtime_options({"num_workers": 2})["num_workers"] == 2
    assert knobs.runtime_options({"serial": 1})["serial"] == 1
    assert knobs.runtime_options({"serial": True})["serial"] is True  # 1 and True are kept apart
    monkeypatch.setenv("TILESCOPE_NAN_CHECK", "1")
    assert knobs.runtime_options({"num_workers": 2})["nan_check"] is True
    monkeypatch.setenv("TILESCOPE_NAN_CHECK", "maybe")
    with pytest.raises(ConfigError, match=r"TILESCOPE_NAN_CHECK='maybe'"):
        knobs.runtime_options({"num_workers": 2})
    monkeypatch.delenv("TILESCOPE_NAN_CHECK")
    with knobs.override(enable_trace=True):
        assert knobs.runtime_options({"num_workers": 2})["enable_trace"] is True
    assert knobs.runtime_options({"num_workers": 2})["enable_trace"] is False
    for _ in range(2):  # a refused configuration is refused every time
        with pytest.raises(ConfigError, match=r"runtime_cfg\['num_workers'\] = -1"):
            knobs.runtime_options({"num_workers": -1})
    wanted = ["add", "mul"]  # a list is not hashable: validated on every call
    assert knobs.runtime_options({"kernel_filter": wanted})["kernel_filter"] == ["add", "mul"]


@pytest.mark.parametrize(
    ("knob", "value", "expected"),
    [
        ("local_memory_bytes", 2**62, f"expected an int of bytes in 1..{knobs.MAX_LOCAL_MEMORY_BYTES} (1 TiB"),
        ("local_memory_bytes", 2 * 2**40, f"expected an int of bytes in 1..{knobs.MAX_LOCAL_MEMORY_BYTES} (1 TiB"),
        ("local_memory_bytes", 0, "expected an int of bytes in 1.."),
        ("task_timeout_s", -1, "expected a number of seconds in 0..604800 (a week; 0 = no budget)"),
        ("task_timeout_s", float("inf"), "expected a number of seconds in 0..604800"),
        ("task_timeout_s", float("nan"), "expected a number of seconds in 0..604800"),
        ("task_timeout_s", 1e10, "expected a number of seconds in 0..604800"),
    ],
)
def test_every_numeric_knob_has_a_range_given_or_from_the_environment(monkeypatch, knob, value, expected):
    options = knobs.compile_options if knob in knobs.COMPILE_KNOBS else knobs.runtime_options
    what = "compile_cfg" if knob in knobs.COMPILE_KNOBS else "runtime_cfg"
    with pytest.raises(ConfigError) as given:
        options({knob: value})
    assert str(given.value) == f"{what}[{knob!r}] = {value!r}: {expected}" or str(given.value).startswith(
        f"{what}[{knob!r}] = {value!r}: {expected}")  # fmt: skip
    var = knobs.all_knobs()[knob].env_var
    monkeypatch.setenv(var, repr(value) if isinstance(value, float) else str(value))
    with pytest.raises(ConfigError) as from_env:
        options(None)
    assert str(from_env.value).startswith(f"environment variable {var}=") and expected in str(from_env.value)


def test_the_ranges_take_their_ends():
    assert knobs.compile_options({"local_memory_bytes": knobs.MAX_LOCAL_MEMORY_BYTES})["local_memory_bytes"] == 2**40
    assert knobs.runtime_options({"task_timeout_s": knobs.MAX_TASK_TIMEOUT_S})["task_timeout_s"] == 604800.0
    assert knobs.runtime_options({"task_timeout_s": 0})["task_timeout_s"] == 0
