"""The dependency graph output: deps.json of real runs against the expected graphs, the
`tilescope deps` summary, and the offline HTML viewer in a real headless browser."""

import argparse
import json

import pytest
import torch
from helpers import headless_page, needs_chromium

import tilescope as ts
from tilescope.tools import deps

import vector_dag

F = ts.f32
C = 8


@ts.kernel
def copy8(a: ts.Tensor[[8, C], F], out: ts.Out[[8, C], F]):
    ts.store(out, [0, 0], ts.load(a, [0, 0], [8, C]))


@ts.jit
def hazards(x: ts.Tensor[[16, C], F], y: ts.Out[[16, C], F], z: ts.Out[[16, C], F]):
    t = ts.create_tensor([16, C], F)
    copy8(x[0:8, :], t[0:8, :])  # 0 writes t[0:8]
    copy8(t[4:12, :], y[0:8, :])  # 1 reads t[4:12]: RAW after 0
    t2 = ts.submit(copy8, x[8:16, :], t[6:14, :], name="refill")  # 2 writes t[6:14]: WAW after 0, WAR after 1
    ts.submit(copy8, x[0:8, :], z[8:16, :], deps=[t2])  # 3: no shared data, explicit edge from 2


@ts.jit
def staged(x: ts.Tensor[[8, C], F], y: ts.Out[[8, C], F]):
    h = ts.create_tensor([8, C], F)
    copy8(x, h)
    for _ in ts.range(0, 2):
        g = ts.create_tensor([8, C], F)  # one per iteration: g, then g#1
        copy8(h, g)
        h = g
    copy8(h, y)


def run_with_deps(fn, *args):
    prog = fn.compile()
    prog.run(*args, enable_dep_gen=True, num_workers=2)
    return prog, prog.work_dir / "dfx_outputs"


@pytest.fixture(scope="module")
def hazards_run(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILESCOPE_BUILD_DIR", str(tmp_path_factory.mktemp("hazards")))
    try:
        yield run_with_deps(hazards, torch.randn(16, C), torch.zeros(16, C), torch.zeros(16, C))
    finally:
        mp.undo()


@pytest.mark.slow
def test_intermediates_are_named_by_their_orchestration_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(tmp_path))
    x, y = torch.randn(8, C), torch.zeros(8, C)
    prog, out = run_with_deps(staged, x, y)
    assert torch.equal(y, x)
    data = json.loads((out / "deps.json").read_text())
    assert [t["name"] for t in data["tensors"]] == ["x", "y", "h", "g", "g#1"]
    assert 'orch.create_tensor(TS_F32, {8, 8}, "g");' in (prog.work_dir / prog.config["ORCHESTRATION"]["source"]).read_text()


@pytest.mark.slow
def test_vector_dag_edges_tasks_and_tensor_names():
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    prog, out = run_with_deps(vector_dag.vector_dag, x, y, torch.zeros(64, 128))
    data = json.loads((out / "deps.json").read_text())
    assert sorted((e["pred"], e["succ"], e["kind"], e["source"]) for e in data["edges"]) == [
        (0, 2, "RAW", "tensormap"),
        (0, 4, "RAW", "tensormap"),
        (1, 3, "RAW", "tensormap"),
        (2, 3, "RAW", "tensormap"),
        (3, 4, "RAW", "tensormap"),
    ]
    assert [(t["id"], t["kernel"], t["core"]) for t in data["tasks"]] == [
        (0, "add", "vec"),
        (1, "mul", "vec"),
        (2, "silu", "vec"),
        (3, "maximum", "vec"),
        (4, "combine", "vec"),
    ]
    assert [(t["name"], t["shape"], t["dtype"]) for t in data["tensors"]] == [
        ("x", [64, 128], "f32"),
        ("y", [64, 128], "f32"),
        ("out", [64, 128], "f32"),
        ("a", [64, 128], "f32"),
        ("b", [64, 128], "f32"),
        ("c", [64, 128], "f32"),
        ("d", [64, 128], "f32"),
    ]
    name = {t["id"]: t["name"] for t in data["tensors"]}
    combine = data["tasks"][4]
    assert [(a["index"], a["role"], name[a["tensor"]], a["region"]) for a in combine["args"]] == [
        (0, "input", "d", [[0, 64], [0, 128]]),
        (1, "input", "a", [[0, 64], [0, 128]]),
        (2, "output", "out", [[0, 64], [0, 128]]),
    ]
    edge_0_4 = next(e for e in data["edges"] if (e["pred"], e["succ"]) == (0, 4))
    assert (edge_0_4["arg"], name[edge_0_4["tensor"]], edge_0_4["pred_arg"]) == (1, "a", 2)
    assert edge_0_4["overlap"] == [[0, 64], [0, 128]]
    assert data["counts"] == {
        "tasks": 5,
        "tensors": 7,
        "edges": 5,
        "by_kind": {"RAW": 5},
        "by_source": {"tensormap": 5},
        "reads": 0,
    }
    assert deps.critical_path(deps.load_deps(out)) == [0, 2, 3, 4]


@pytest.mark.slow
def test_war_waw_on_overlapping_slices_and_explicit_edge(hazards_run):
    _, out = hazards_run
    data = json.loads((out / "deps.json").read_text())
    tmp = next(t["id"] for t in data["tensors"] if t["name"] == "t")
    rows = [
        (
            e["pred"],
            e["succ"],
            e["arg"],
            e["kind"],
            e["source"],
            e["tensor"],
            e["pred_region"],
            e["succ_region"],
            e["overlap"],
        )
        for e in data["edges"]
    ]
    assert rows == [
        (0, 1, 0, "RAW", "tensormap", tmp, [[0, 8], [0, 8]], [[4, 12], [0, 8]], [[4, 8], [0, 8]]),
        (0, 2, 1, "WAW", "tensormap", tmp, [[0, 8], [0, 8]], [[6, 14], [0, 8]], [[6, 8], [0, 8]]),
        (1, 2, 1, "WAR", "tensormap", tmp, [[4, 12], [0, 8]], [[6, 14], [0, 8]], [[6, 12], [0, 8]]),
        (2, 3, -1, "ORDER", "explicit", None, None, None, None),
    ]
    refill = data["tasks"][2]
    assert (refill["name"], refill["kernel"]) == ("refill", "copy8")
    assert [(a["role"], a["tensor"], a["region"], a["offset"]) for a in refill["args"]] == [
        ("input", 0, [[8, 16], [0, 8]], 64),
        ("output", tmp, [[6, 14], [0, 8]], 48),
    ]
    assert [t["name"] for t in data["tensors"]] == ["x", "y", "z", "t"]  # t: the orchestration's variable


@pytest.mark.slow
def test_cli_summary(hazards_run, capsys):
    prog, out = hazards_run
    for where in (prog.work_dir, out, out / "deps.json"):
        assert deps.run_cli(argparse.Namespace(dir=str(where), task=[], tensor=[])) == 0
        assert capsys.readouterr().out.splitlines() == [
            "hazards: 4 tasks, 4 edges",
            "  by kind:   ORDER 1, RAW 1, WAR 1, WAW 1",
            "  by source: explicit 1, tensormap 3",
            "  critical path: 4 tasks: 0 copy8 -> 1 copy8 -> 2 refill -> 3 copy8",
            f"open {out / 'deps_graph.html'} in a browser (works offline) to explore the graph",
        ]


@pytest.mark.slow
def test_cli_registers_subcommand(hazards_run, capsys):
    parser = argparse.ArgumentParser(prog="tilescope")
    deps.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["deps", str(hazards_run[0].work_dir)])
    assert args.fn(args) == 0
    assert capsys.readouterr().out.startswith("hazards: 4 tasks, 4 edges\n")


@pytest.mark.parametrize(
    "content, why",
    [
        (None, "no deps.json at"),
        ("{not json", "is not a readable deps.json"),
        ('{"tasks": 3}', "is not a tilescope deps.json"),
    ],
)
def test_cli_missing_or_corrupt_file(tmp_path, capsys, content, why):
    if content is not None:
        (tmp_path / "deps.json").write_text(content)
    assert deps.run_cli(argparse.Namespace(dir=str(tmp_path), task=[], tensor=[])) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tilescope deps: ") and why in lines[0]


@pytest.mark.slow
def test_html_is_self_contained(hazards_run):
    html = (hazards_run[1] / "deps_graph.html").read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html.replace("https://github.com/dagrejs/dagre", "")
    assert "<script src" not in html and "<link" not in html
    assert "Copyright (c) 2012-2014 Chris Pettitt" in html  # the vendored layout library's license


@pytest.mark.slow
@needs_chromium
def test_html_in_headless_chromium(hazards_run):
    with headless_page(hazards_run[1] / "deps_graph.html") as (page, errors, requests):
        page.wait_for_selector("g.task")
        ids = page.eval_on_selector_all("svg g.task", "els => els.map(e => Number(e.dataset.taskId))")
        assert sorted(ids) == [0, 1, 2, 3]
        labels = page.eval_on_selector_all("svg g.task text", "els => els.map(e => e.textContent)")
        assert "2: refill" in labels
        assert page.locator("path.edge").count() == 4
        assert page.locator("path.kind-WAR").count() == 1 and page.locator("path.kind-WAW").count() == 1

        page.click("g.task[data-task-id='2']")
        assert page.inner_text("#sel-title") == "task 2: refill"
        args = page.eval_on_selector_all(
            "#sel-args tr.arg", "rs => rs.map(r => r.innerText.split('\\t'))"
        )
        assert args == [["0", "input", "x", "[8:16, 0:8]"], ["1", "output", "t", "[6:14, 0:8]"]]
        assert "WAR" in page.inner_text("#sel-in") and "WAW" in page.inner_text("#sel-in")
        assert "deps=" in page.inner_text("#sel-out")

        page.fill("#search", "3")
        page.press("#search", "Enter")
        assert page.inner_text("#sel-title") == "task 3: copy8"
        page.fill("#search", "99")
        page.press("#search", "Enter")
        assert page.inner_text("#msg") == "no task 99"
    assert errors == []
    assert all(u.startswith("file://") for u in requests), requests


@pytest.mark.slow
def test_task_and_tensor_views_name_every_region_and_edge(hazards_run, capsys):
    _, out = hazards_run
    data = deps.load_deps(out)
    assert deps.task_view(data, 2).splitlines()[1:] == [
        "  arg 0 input  x[8:16, 0:8]",
        "  arg 1 output t[6:14, 0:8]",
        "  waits for: task 0 copy8: WAW on t; task 1 copy8: WAR on t",
        "  waited on by: task 3 copy8: ORDER (explicit)",
    ]
    assert deps.task_view(data, 2).splitlines()[0].startswith("task 2 refill (kernel copy8) on worker ")
    assert deps.tensor_view(data, "t").splitlines() == [
        "tensor t f32[16, 8]",
        "  task    0 copy8   output arg 1  t[0:8, 0:8]",
        "  task    1 copy8   input  arg 0  t[4:12, 0:8]",
        "  task    2 refill  output arg 1  t[6:14, 0:8]",
    ]
    from tilescope import cli

    assert cli.main(["deps", str(out), "--task", "3", "--tensor", "z"]) == 0
    printed = capsys.readouterr().out
    assert "  waits for: task 2 refill: ORDER (explicit)" in printed and "  task    3 copy8   output arg 1  z[8:16, 0:8]" in printed
    assert cli.main(["deps", str(out), "--task", "9"]) == 1
    assert capsys.readouterr().err.strip().endswith("no task 9 in " + str(out / "deps.json") + ": its ids are 0..3")
    assert cli.main(["deps", str(out), "--tensor", "q"]) == 1
    err = capsys.readouterr().err
    assert "no tensor 'q' in" in err and err.strip().endswith("its tensors: x, y, z, t")
