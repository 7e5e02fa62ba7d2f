"""One confinement policy for every file a tool reads or writes under a build: each component of
the path is checked, a symbolic link leading out of the build is refused with a message naming
the link and where it points, and nothing outside is read or written. A rule over the package's
source keeps every reader and writer on it."""

import ast
import importlib
import json
import shutil
from pathlib import Path

import pytest
import triage_programs as tp
from helpers import private_copy, vector_dag_build

import tilescope.build.paths as paths
from tilescope.agents.tools import TOOLS, answer
from tilescope.analysis.data import save_snapshot
from tilescope.build.paths import OutsideBuildError, dfx_dir, inside
from tilescope.cli import main as cli

SRC = Path(paths.__file__).resolve().parents[1]  # src/tilescope
# the names of files and folders inside a build (paths.py's table), as their values
BUILD_NAMES = {
    v for k, v in vars(paths).items() if k.isupper() and isinstance(v, str) and v and " " not in v and "{" not in v
}
CHECKED = {"inside", "dfx_dir", "confined"}


def _modules():
    for f in sorted(SRC.rglob("*.py")):
        if f == Path(paths.__file__).resolve() or f.name == "__main__.py":
            continue
        rel = f.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield f, name


def test_no_path_under_a_build_is_made_with_a_slash_outside_the_policy():
    """A build's names are joined only by ``inside``/``dfx_dir`` (which check each component), and
    what they return is never extended with ``/`` by a name of the table."""
    found = []
    for f, name in _modules():
        module = importlib.import_module(name)
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
                continue
            right = node.right
            value = None
            if isinstance(right, ast.Name):
                value = getattr(module, right.id, None)
            elif isinstance(right, ast.Attribute) and isinstance(right.value, ast.Name):
                value = getattr(getattr(module, right.value.id, None), right.attr, None)
            elif isinstance(right, ast.Constant):
                value = right.value
            left = node.left
            if isinstance(value, str) and value in BUILD_NAMES:
                found.append(f"{f.relative_to(SRC)}:{node.lineno}: '/ {ast.unparse(right)}'")
            elif isinstance(left, ast.Call) and getattr(left.func, "id", None) in CHECKED:
                found.append(f"{f.relative_to(SRC)}:{node.lineno}: '{ast.unparse(left)} / ...'")
    assert not found, "join a build's names with paths.inside(base, *names) or dfx_dir(work, *names):\n" + "\n".join(
        found
    )


def test_inside_checks_every_component_and_names_the_link(tmp_path):
    work, outside = tmp_path / "build", tmp_path / "elsewhere"
    (work / "dfx_outputs" / "in_build").mkdir(parents=True)
    outside.mkdir()
    (work / "dfx_outputs" / "alias").symlink_to(work / "dfx_outputs" / "in_build")  # inside: followed
    assert inside(work, "dfx_outputs", "alias", "x.json") == work / "dfx_outputs" / "alias" / "x.json"
    (work / "dfx_outputs" / "triage").symlink_to(outside)
    with pytest.raises(OutsideBuildError) as e:
        inside(work, "dfx_outputs", "triage/fix", "a.py")
    assert str(e.value).startswith(f"{work}/dfx_outputs/triage is a symbolic link to {outside}, outside {work}")
    assert "Remove the link" in str(e.value)
    (work / "loop").symlink_to(work / "loop")
    with pytest.raises(OutsideBuildError, match="loop is a symbolic link that loops"):
        inside(work, "loop", "x")
    with pytest.raises(OutsideBuildError, match="'../x' is not a name inside"):
        inside(work, "../x")
    # dfx_dir makes what it checked, and nothing through a link out
    with pytest.raises(OutsideBuildError):
        dfx_dir(work, "triage", "fix")
    assert list(outside.iterdir()) == []
    assert dfx_dir(work, "localize", "probe").is_dir()


@pytest.fixture(scope="module")
def instrumented(tmp_path_factory):
    """A vector_dag build run with the tensor dump, the dependency graph and the trace on."""
    cfg = {"enable_dump_tensor": 2, "enable_dep_gen": True, "enable_trace": True}
    return vector_dag_build(tmp_path_factory.mktemp("instrumented"), cfg)


def _moved_out(path: Path, outside: Path) -> Path:
    """Move ``path`` to ``outside`` and leave a symbolic link to it in its place."""
    target = outside / path.name
    shutil.move(path, target)
    path.symlink_to(target)
    return target


def _tool(name):
    return next(t for t in TOOLS if t.name == name)


@pytest.mark.slow
@pytest.mark.parametrize("file,tool", [("deps.json", "deps"), ("trace.json", "trace")])
def test_the_agent_tools_refuse_a_linked_deps_or_trace_file(instrumented, tmp_path, file, tool):
    work, outside = private_copy(instrumented, tmp_path / "b"), tmp_path / "outside"
    outside.mkdir()
    ok, _ = answer(_tool(tool), {"build_dir": str(work)})
    assert ok
    target = _moved_out(work / "dfx_outputs" / file, outside)
    ok, data = answer(_tool(tool), {"build_dir": str(work)})
    assert not ok
    assert f"dfx_outputs/{file} is a symbolic link to {target}, outside {work}" in data["message"]


@pytest.mark.slow
def test_a_linked_tensor_dump_folder_is_neither_read_nor_written(instrumented, tmp_path, capsys):
    work, outside = private_copy(instrumented, tmp_path / "b"), tmp_path / "outside"
    outside.mkdir()
    target = _moved_out(work / "dfx_outputs" / "tensor_dump", outside)
    before = sorted(p.name for p in target.iterdir())
    ok, data = answer(_tool("dump_values"), {"build_dir": str(work), "index": 0})
    assert not ok and f"dfx_outputs/tensor_dump is a symbolic link to {target}" in data["message"]
    assert cli(["dump", str(work), "-i", "0", "--export"]) != 0
    err = capsys.readouterr().err
    assert f"tensor_dump is a symbolic link to {target}, outside {work}" in err and "Traceback" not in err
    assert sorted(p.name for p in target.iterdir()) == before  # no txt/ or .pt written there


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> Path:
    """The short store (a store loop one chunk short) compiled, with its inputs and golden saved."""
    prog = tp.short_store.compile(build_dir=str(tmp_path_factory.mktemp("failing")))
    inputs = tp.short_store_inputs()
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"z": tp.short_store_golden(inputs["x"])},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    return prog.work_dir


@pytest.mark.slow
@pytest.mark.parametrize("linked", ["dfx_outputs", "dfx_outputs/triage/fix"])
def test_triage_fix_writes_nothing_through_a_link_out_of_the_build(failing, tmp_path, capsys, linked):
    work, outside = private_copy(failing, tmp_path / "b"), tmp_path / "outside" / "x"
    outside.mkdir(parents=True)
    (work / linked).parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / linked, ignore_errors=True)
    (work / linked).symlink_to(outside)
    code = cli(["triage", str(work), "--fix"])
    out, err = capsys.readouterr()
    assert code != 0 and "Traceback" not in out + err, out + err
    assert f"{work}/{linked} is a symbolic link to {outside}, outside {work}" in out + err, out + err
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_dsl_source_reached_through_a_link_is_followed_as_named(tmp_path, capsys):
    """The build records the model as the user named it (not its resolved target), so --fix finds
    it again and proposes against it rather than calling it gone."""
    real, linked = tmp_path / "real" / "model_impl.py", tmp_path / "models" / "model.py"
    real.parent.mkdir()
    linked.parent.mkdir()
    real.write_text(Path(tp.__file__).read_text(encoding="utf-8"))
    linked.symlink_to(real)
    spec = importlib.util.spec_from_file_location("linked_model", linked)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prog = module.short_store.compile(build_dir=str(tmp_path / "builds"))
    recorded = json.loads((prog.work_dir / "report" / "report.json").read_text())["dsl_sources"]
    assert list(recorded) == [str(linked)]
    inputs = module.short_store_inputs()
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"z": module.short_store_golden(inputs["x"])},
                  {"rtol": 1e-5, "atol": 1e-5})  # fmt: skip
    cli(["triage", str(prog.work_dir), "--fix"])
    capsys.readouterr()
    fix = json.loads((prog.work_dir / "dfx_outputs" / "triage" / "report.json").read_text())["fix"]
    assert fix["verified"] is True and fix["edit"]["file"] == str(linked), fix
    assert not any("is gone" in n for n in fix["notes"])
    assert real.read_text(encoding="utf-8") == Path(tp.__file__).read_text(encoding="utf-8")  # never edited


def test_builds_lists_a_build_whose_file_links_out_as_left_alone(tmp_path):
    from tilescope.tools.builds import clean_builds, list_builds

    base, outside = tmp_path / "builds", tmp_path / "elsewhere"
    work = base / "_jit_k_20260101_000000"
    work.mkdir(parents=True)
    outside.mkdir()
    (outside / "kernel_config.py").write_text("PROGRAM = 'k'\n")
    (work / "kernel_config.py").symlink_to(outside / "kernel_config.py")
    listing = list_builds(base)
    assert listing.builds == []
    [(path, why)] = listing.others
    assert path == work and why.startswith(f"{work}/kernel_config.py is a symbolic link to {outside}")
    clean_builds(base, keep=0)
    assert (work / "kernel_config.py").is_symlink() and (outside / "kernel_config.py").is_file()
