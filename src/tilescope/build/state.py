"""What a build's binaries were built from, and bringing a hand-edited build up to date.

Invariants:
- ``build_state.json`` records, for every C++ source of a build, the sha256 of the text its
  binary was built from, and the hashes of the final IR dump (per kernel and for the
  orchestration). It is written atomically when the build is compiled and after each refresh.
- An edit is a content change: ``touch`` alone rebuilds nothing, and a copied-in older file is
  still noticed. Only edited sources, missing binaries and binaries whose bytes are not the ones
  recorded (copied over from another kernel, corrupt) are rebuilt, so a build never loads a
  binary it did not build; the compiler cache makes a return to an earlier text a cache hit.
- An edited IR dump is re-lowered into the C++ of the kernels (and the orchestration) whose IR
  changed, with the build's recorded ``check_bounds`` (a checked build stays checked). A C++
  file that would be regenerated but was also edited by hand is never overwritten: that is a
  conflict, reported with both paths.
- Signature changes (argument count, kind, dtype, direction) are refused with the fix; nothing
  the user wrote is deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilescope.build.config_check import check_state
from tilescope.build.paths import BUILD_STATE, atomic_write, confined, inside
from tilescope.build.signature_check import FIX, SignatureMismatch, check_sources
from tilescope.codegen.kernel_config import arg_spec
from tilescope.codegen.kernel_cpp import kernel_cpp, with_streamed
from tilescope.codegen.kernel_fusion import streamed_outputs
from tilescope.codegen.orchestration_cpp import orchestration_cpp
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Program
from tilescope.ir.printer import function_lines, kernel_str
from tilescope.ir.traverse import recursion_room
from tilescope.ir.verifier import verify_program
from tilescope.language.frontend import load_source
from tilescope.toolchain import compiler as toolchain

log = logging.getLogger("tilescope")

STATE_FILE = BUILD_STATE
STATE_FORMAT = 1


def sha256_text(text: str) -> str:
    """The sha256 hex digest of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_file(path: Path) -> str:
    """The sha256 hex digest of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ir_hashes(program: Program) -> dict[str, Any]:
    """Hashes of the printed IR of every kernel and of the orchestration."""
    orch = "\n".join(function_lines("@ts.jit", program.name, program.params, program.body))
    return {
        "kernels": {k.name: sha256_text(kernel_str(k)) for k in program.kernels},
        "orchestration": sha256_text(orch),
    }


def _sources(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, binary) of every C++ file, kernels first, relative to the build dir."""
    orch = config["ORCHESTRATION"]
    return [(k["source"], k["binary"]) for k in config["KERNELS"]] + [(orch["source"], orch["binary"])]


def source_hashes(work: Path, config: dict[str, Any]) -> dict[str, str]:
    """The sha256 of every C++ source of ``work`` as it is now (kernels, then the orchestration),
    by path relative to it: what a data snapshot records of the code it was saved with."""
    return {src: sha256_file(work / src) for src, _ in _sources(config) if (work / src).is_file()}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def record_state(
    work: Path,
    config: dict[str, Any],
    ir: dict[str, Any],
    generated: dict[str, str] | None = None,
    generated_with: dict[str, Any] | None = None,
) -> None:
    """Record what every binary of ``work`` was built from (after a compile or a refresh).

    ``ir`` holds the IR dump's hashes (see ``ir_hashes``); ``generated`` the sha256 of the text
    codegen last wrote to each source (default: the current text, right after a compile). A
    source whose text differs from its generated text has been edited by hand.
    ``generated_with`` records the compile options the generated text was written with
    (``check_bounds``, ``verify`` and ``bf16_matmul``); a re-lowered kernel is written with the same ones.
    """
    sources = {}
    for src, binary in _sources(config):
        sha = sha256_file(work / src)
        sources[src] = {
            "sha256": sha,
            "generated_sha256": (generated or {}).get(src, sha),
            "binary": binary,
            # None: not built yet (a compile for the interp platform runs no g++)
            "binary_sha256": sha256_file(work / binary) if (work / binary).is_file() else None,
        }
    ir_file = f"ir/{config['PROGRAM']}.py"
    state = {"format": STATE_FORMAT, "sources": sources, "ir": {"file": ir_file, **ir}}
    if generated_with is not None:
        state["generated_with"] = generated_with
    _write_json(inside(work, STATE_FILE), state)


def ir_state(work: Path, config: dict[str, Any], program: Program) -> dict[str, Any]:
    """The ``ir`` entry of ``build_state.json``: the IR dump's file hash and ``ir_hashes(program)``."""
    return {"sha256": sha256_file(work / f"ir/{config['PROGRAM']}.py"), **ir_hashes(program)}


def load_state(work: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``build_state.json`` of ``work``, checked against the build's ``config``; a TilescopeError
    (compile again) when it is missing, corrupt, of another format or lacks what refresh reads."""
    path = inside(work, STATE_FILE)
    if not path.is_file():
        raise TilescopeError(
            f"{work} has no {STATE_FILE}: it cannot tell which sources were edited; compile the program again"
        )
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TilescopeError(f"{path} is corrupt or unreadable ({e}); compile the program again") from None
    if isinstance(state, dict) and state.get("format") != STATE_FORMAT:
        raise TilescopeError(
            f"{path} has format {state.get('format')}, expected {STATE_FORMAT}; compile again"
        )
    check_state(work, path, state, config)
    return state


def hand_edited(work: Path, config: dict[str, Any]) -> list[str]:
    """The C++ sources of ``work`` whose text is not what codegen wrote (edited by hand), as
    paths relative to it; [] when the build's state cannot be read."""
    try:
        state = load_state(work, config)
    except TilescopeError:
        return []
    return sorted(
        src
        for src, entry in state["sources"].items()
        if (work / src).is_file() and sha256_file(work / src) != entry.get("generated_sha256")
    )


def _generated_with(state: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The options the build's C++ was generated with: as recorded, else (a build recorded
    before they were) its kernel_config's ``check_bounds`` and ``bf16_matmul``, and ``verify``
    unknown (None)."""
    recorded = state.get("generated_with")
    rc = config["RUNTIME_CONFIG"]
    if isinstance(recorded, dict) and isinstance(recorded.get("check_bounds"), bool):
        return {"bf16_matmul": rc.get("bf16_matmul", "exact"), **recorded}
    return {"check_bounds": bool(rc.get("check_bounds", False)), "verify": None, "bf16_matmul": rc.get("bf16_matmul", "exact")}


def stores_confined(work: Path, config: dict[str, Any], loaded: dict[str, str]) -> bool:
    """Whether no store of a run of ``work`` can leave the tensor its kernel was given: every
    binary is built from the text codegen wrote, of a program the verifier checked, with bounds
    checks. ``loaded`` is the sha256 of each binary's bytes as loaded (by binary path relative to
    ``work``): each must be the recorded one, built from the generated text. False when the build's
    state cannot be read, it does not record verify=True and check_bounds=True, a source was
    edited by hand since it was generated, or a binary is not the one recorded."""
    try:
        state = load_state(work, config)
    except TilescopeError:
        return False
    recorded = state.get("generated_with")
    if not isinstance(recorded, dict) or recorded.get("check_bounds") is not True or recorded.get("verify") is not True:
        return False
    sources = state["sources"]
    for src, binary in _sources(config):
        entry = sources.get(src)
        if not isinstance(entry, dict) or loaded.get(binary) is None:
            return False
        if entry.get("binary_sha256") != loaded[binary] or entry.get("sha256") != entry.get("generated_sha256"):
            return False
    return True


@dataclass
class RefreshReport:
    """What a refresh did: sources re-lowered from the IR dump, edited, missing and rebuilt, of ``total``."""

    relowered: list[str] = field(default_factory=list)  # C++ files regenerated from an edited IR dump
    edited: list[str] = field(default_factory=list)  # C++ files whose text changed since their binary
    missing: list[str] = field(default_factory=list)  # binaries that were missing
    replaced: list[str] = field(default_factory=list)  # binaries that are not the ones built (copied over, corrupt)
    rebuilt: list[str] = field(default_factory=list)  # sources compiled (edited + missing)
    total: int = 0


def _relower_ir(
    work: Path, config: dict[str, Any], state: dict[str, Any], report: RefreshReport
) -> Program | None:
    """Re-lower an edited IR dump into the C++ of what changed; None if the dump is unchanged."""
    ir_path = confined(work, state["ir"]["file"], f"{STATE_FILE}'s ir['file']")
    if not ir_path.is_file() or sha256_file(ir_path) == state["ir"]["sha256"]:
        return None
    program = load_source(ir_path.read_text(), str(ir_path))
    verify_program(program, config["RUNTIME_CONFIG"]["local_memory_bytes"])
    _check_ir_signatures(program, config, ir_path)
    hashes = ir_hashes(program)
    generated_with = _generated_with(state, config)
    check_bounds = bool(generated_with["check_bounds"])
    bf16_dot = generated_with["bf16_matmul"] == "dot"
    targets: list[tuple[str, str]] = []
    streamed = streamed_outputs(program)
    for k in program.kernels:
        source = next(x["source"] for x in config["KERNELS"] if x["name"] == k.name)
        stream = streamed.get(k.name, frozenset())
        if hashes["kernels"][k.name] != state["ir"]["kernels"].get(k.name):
            targets.append((source, kernel_cpp(k, check_bounds=check_bounds, streamed=stream, bf16_dot=bf16_dot)))
        elif sha256_file(work / source) == state["sources"][source]["generated_sha256"]:
            # NOTE: which outputs stream depends on the whole program: a kernel whose own IR is
            # unchanged gets the stream lines the edited program gives it, the rest as it was (one
            # edited by hand is left to its edit)
            now = (work / source).read_text(encoding="utf-8")
            text = with_streamed(now, k, stream)
            if text != now:
                targets.append((source, text))
    if hashes["orchestration"] != state["ir"]["orchestration"]:
        targets.append((config["ORCHESTRATION"]["source"], orchestration_cpp(program)))
    conflicts = [
        rel for rel, _ in targets if sha256_file(work / rel) != state["sources"][rel]["generated_sha256"]
    ]
    if conflicts:
        raise TilescopeError(
            f"{ir_path.relative_to(work)} was edited, and so were the C++ files it would regenerate: "
            f"{', '.join(conflicts)}. Nothing was overwritten; keep one of the two edits (revert the other) "
            "and run again"
        )
    for rel, text in targets:
        atomic_write(work / rel, text)
        report.relowered.append(rel)
    log.info(
        "[ir->cpp] %s edited: re-lowered %s",
        ir_path.relative_to(work),
        ", ".join(report.relowered) if report.relowered else "nothing (no kernel or orchestration changed)",
    )
    return program


def _check_ir_signatures(program: Program, config: dict[str, Any], ir_path: Path) -> None:
    problems = []
    args = [arg_spec(p) for p in program.params]
    if args != config["ARGS"]:
        problems.append(f"the program's parameters changed: {args} (build: {config['ARGS']})")
    recorded = {k["name"]: k for k in config["KERNELS"]}
    names = [k.name for k in program.kernels]
    if names != list(recorded):
        problems.append(f"the kernels changed: {names} (build: {list(recorded)})")
    for k in program.kernels:
        if k.name in recorded and [arg_spec(p) for p in k.params] != recorded[k.name]["params"]:
            problems.append(f"kernel {k.name}'s parameters changed")
    if problems:
        raise SignatureMismatch(f"{ir_path}: " + "; ".join(problems) + f"\n  {FIX}", [f"{ir_path}: {p}" for p in problems])


@recursion_room()
def refresh(work: Path, config: dict[str, Any]) -> RefreshReport:
    """Bring a build's binaries up to date with its (possibly hand-edited) IR dump and C++."""
    state = load_state(work, config)
    report = RefreshReport()
    missing_sources = [src for src, _ in _sources(config) if not (work / src).is_file()]
    if missing_sources:
        raise TilescopeError(
            f"{work} is missing {', '.join(missing_sources)}: the build is incomplete; compile the program again"
        )
    program = _relower_ir(work, config, state, report)
    jobs = []
    for src, binary in _sources(config):
        recorded = state["sources"].get(src, {})
        edited = sha256_file(work / src) != recorded.get("sha256")
        missing = not (work / binary).is_file()
        replaced = not missing and sha256_file(work / binary) != recorded.get("binary_sha256")
        if edited and src not in report.relowered:
            report.edited.append(src)
        if missing:
            report.missing.append(binary)
        if replaced and not edited:
            report.replaced.append(binary)
        if edited or missing or replaced:
            report.rebuilt.append(src)
            jobs.append(toolchain.BuildJob(work / src, work / binary))
    report.total = len(_sources(config))
    check_sources(work, config, report.edited)
    if not jobs and program is None:
        log.info("[cpp->.so] no edits since last build; reusing %d binaries", report.total)
        return report
    what = []
    if report.relowered:
        what.append(f"{len(report.relowered)} re-lowered from IR: {', '.join(report.relowered)}")
    if report.edited:
        what.append(
            f"{len(report.edited)} edited source{'s' if len(report.edited) > 1 else ''}: "
            f"{', '.join(report.edited)}"
        )
    if report.missing:
        what.append(
            f"{len(report.missing)} missing binar{'ies' if len(report.missing) > 1 else 'y'}: "
            f"{', '.join(report.missing)}"
        )
    if report.replaced:
        what.append(
            f"{len(report.replaced)} binar{'ies' if len(report.replaced) > 1 else 'y'} not built from "
            f"{'their' if len(report.replaced) > 1 else 'its'} source (replaced or corrupt): {', '.join(report.replaced)}"
        )
    log.info("[cpp->.so] %s; rebuilding %d of %d", "; ".join(what), len(jobs), report.total)
    toolchain.build(jobs)
    generated = {src: rec["generated_sha256"] for src, rec in state["sources"].items()}
    generated.update({rel: sha256_file(work / rel) for rel in report.relowered})
    ir = state["ir"] if program is None else ir_state(work, config, program)
    record_state(work, config, {k: v for k, v in ir.items() if k != "file"}, generated, state.get("generated_with"))
    return report
