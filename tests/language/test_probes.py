"""ts.probe: a kernel's tile kept, with its task and line, when a run has probes on; nothing (and
the same math) when off; in the C++, kernel_config.py, the IR dump, the tensor dump, the viewer and
print_intermediates; bad uses are DSL errors."""

import json

import pytest
import torch
from helpers import line_of

import tilescope as ts
from tilescope.cli import main as cli
from tilescope.errors import DSLError
from tilescope.knobs import ConfigError


@ts.kernel
def scaled_rows(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
    t = ts.load(x, [0, 0], [8, 16])
    m = ts.row_max(t)
    ts.probe(m, "rowmax")
    for c in ts.range(0, 16, 8):
        part = ts.load(x, [0, c], [8, 8])
        ts.probe(part * 2.0, "doubled")
    ts.store(y, [0, 0], t / m)


@ts.jit
def scaled(x: ts.Tensor[[24, 16], ts.f32], y: ts.Out[[24, 16], ts.f32]):
    for r in ts.range(0, 24, 8):
        scaled_rows(x[r : r + 8, :], y[r : r + 8, :])


@pytest.fixture
def prog():
    return scaled.compile()


def data():
    x = torch.rand(24, 16) + 0.5
    return x, torch.zeros(24, 16)


def manifest(prog):
    return json.loads((prog.work_dir / "dfx_outputs" / "tensor_dump" / "tensor_dump.json").read_text())


@pytest.mark.slow
def test_generated_code_and_kernel_config_name_every_probe(prog):
    cpp = (prog.work_dir / "kernels" / "vec" / "scaled_rows.cpp").read_text()
    assert "#include <tilescope/probe.hpp>" in cpp
    assert 'extern "C" void ts_probe_install(ProbeSink sink) { probe_sink = sink; }' in cpp
    assert "probe(probe_sink, 0 /* rowmax */, m);" in cpp and "probe(probe_sink, 1 /* doubled */, part * 2.0f);" in cpp
    table = prog.kernels[0]["probes"]
    assert [(p["id"], p["name"]) for p in table] == [(0, "rowmax"), (1, "doubled")]
    assert table[0]["line"].endswith(f":{line_of(scaled_rows, 'ts.probe(m, ')}")
    assert "ts.probe(m, 'rowmax')" in (prog.work_dir / "ir" / "scaled.py").read_text()


@pytest.mark.slow
def test_probes_on_keep_every_capture_in_order_with_its_values(prog):
    x, y = data()
    prog.run(x, y, probes=True)
    recs = [r for r in manifest(prog)["records"] if r["stage"] == "probe"]
    assert [(r["task_id"], r["probe"], r["arg_index"]) for r in recs] == [
        (t, name, i) for t in range(3) for i, name in enumerate(("rowmax", "doubled", "doubled"))
    ]
    assert all(r["role"] == "probe" and r["tensor"] is None and r["region"] is None for r in recs)
    assert recs[0]["line"] == prog.kernels[0]["probes"][0]["line"] and recs[0]["probe_id"] == 0
    payload = (prog.work_dir / "dfx_outputs" / "tensor_dump" / "tensor_dump.bin").read_bytes()

    def value(r):
        raw = payload[r["bin_offset"] : r["bin_offset"] + r["bin_size"]]
        return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(r["shape"])

    for t in range(3):
        rows = x[8 * t : 8 * t + 8]
        mine = [r for r in recs if r["task_id"] == t]
        assert torch.equal(value(mine[0]), rows.amax(dim=-1, keepdim=True))
        assert torch.equal(value(mine[1]), rows[:, 0:8] * 2.0) and torch.equal(value(mine[2]), rows[:, 8:16] * 2.0)


@pytest.mark.slow
def test_probes_off_write_nothing_and_do_not_change_the_outputs(prog):
    x, y_off = data()
    prog.run(x, y_off)
    assert not (prog.work_dir / "dfx_outputs" / "tensor_dump").exists()
    y_on = torch.zeros_like(y_off)
    prog.run(x, y_on, probes=True)
    assert torch.equal(y_on, y_off) and torch.equal(y_off, x / x.amax(dim=-1, keepdim=True))
    prog.run(x, torch.zeros_like(y_off))  # the sink is taken back: no dump rewritten
    assert manifest(prog)["counts"]["probe"] == {"probe": 9}


@pytest.mark.slow
def test_probes_join_a_full_dump_and_the_viewer_lists_them(prog, capsys):
    x, y = data()
    prog.run(x, y, probes=True, enable_dump_tensor=2)
    m = manifest(prog)
    assert m["level"] == 2 and m["counts"]["probe"] == {"probe": 9}
    assert m["counts"]["before_dispatch"]["input"] == 3
    capsys.readouterr()
    assert cli(["dump", str(prog.work_dir), "--stage", "probe", "--task", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 of" in out and "probe:rowmax" in out and out.count("probe:doubled") == 2 and "BAD" not in out


@pytest.mark.slow
def test_print_intermediates_shows_probes(prog, capsys):
    x, y = data()
    prog.run(x, y, probes=True, print_intermediates=2)
    out = capsys.readouterr().out
    line = prog.kernels[0]["probes"][0]["line"]
    assert f"  probe rowmax = (probe at {line}) [8, 1] float32 min" in out


@pytest.mark.slow
def test_probes_are_sim_only(prog):
    x, y = data()
    with pytest.raises(ConfigError, match="'probes': implemented on the sim platform only"):
        prog.run(x, y, platform="interp", probes=True)
    prog.run(x, y, platform="interp")  # a probe is nothing on interp
    torch.testing.assert_close(y, x / x.amax(dim=-1, keepdim=True))


def _compile_error(body_line: str) -> DSLError:
    src = f"""
import tilescope as ts

@ts.kernel
def k(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    t = ts.load(x, [0, 0], [8, 8])
    {body_line}
    ts.store(y, [0, 0], t)

@ts.jit
def p(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[8, 8], ts.f32]):
    k(x, y)
"""
    from tilescope.language.frontend import load_source
    from tilescope.launch.program import compile_program

    with pytest.raises(DSLError) as info:
        compile_program(load_source(src, "<probe-errors>"))
    return info.value


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('ts.probe(1.5, "c")', "ts.probe needs a tile, got a number"),
        ("ts.probe(t, 3)", "ts.probe's name must be a string, got"),
        ('ts.probe(t, "a b")', "ts.probe name 'a b' is not a name"),
    ],
)
def test_bad_probes_are_dsl_errors_at_their_line(line, message):
    err = _compile_error(line)
    assert message in err.message
    assert err.loc is not None and err.loc.line == 7
