"""The tensor dump viewer (``tilescope dump``) on dumps synthesized here per the format spec
(docs/dump.md), independently of the producer: listing, filters, export, diff, decoding, and
every kind of corrupt input."""

import argparse
import json
import os
import struct
import subprocess
import sys

import pytest
import torch

from tilescope.tools import dump_viewer as dv
from tilescope.tools.dump_viewer import DumpError, load_dump, select

# Spec dtype name -> (torch dtype, struct code or None) for the synthesizer.
SPEC_DTYPES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
    torch.float64: "f64",
    torch.int64: "i64",
}
STAGE_ORDER = {"before_dispatch": 0, "after_completion": 1}


def _le_bytes(t):
    """Row-major little-endian bytes of ``t`` (bf16/f16 as their 2-byte patterns, bool 1 byte)."""
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return bytes(int(v) for v in t.tolist())
    if t.dtype in (torch.bfloat16, torch.float16):
        return b"".join(struct.pack("<H", v & 0xFFFF) for v in t.view(torch.int16).tolist())
    code = {
        torch.float32: "f",
        torch.float64: "d",
        torch.int32: "i",
        torch.int64: "q",
        torch.int8: "b",
        torch.uint8: "B",
    }[t.dtype]
    return struct.pack(f"<{t.numel()}{code}", *t.tolist())


def write_dump(
    out, entries, *, level=2, program="prog", status=0, error="", truncate=None, overwrite=(), counters=None
):
    """Write ``out/tensor_dump.json`` + ``tensor_dump.bin`` from ``entries``.

    An entry is ``(task_id, kernel, stage, role, arg_index, tensor_or_scalar, tensor_name)``; a
    Python number is a scalar (f32; int -> i32). ``truncate`` maps a record index to the bytes
    kept; ``overwrite`` lists record indices flagged overwritten.
    """
    out.mkdir(parents=True, exist_ok=True)
    entries = sorted(entries, key=lambda e: (e[0], STAGE_ORDER[e[2]], e[4]))
    truncate = truncate or {}
    records, blob, counts, func_ids = [], bytearray(), {}, {}
    for i, (task, kernel, stage, role, arg, val, name) in enumerate(entries):
        counts.setdefault(stage, {}).setdefault(role, 0)
        counts[stage][role] += 1
        rec = {
            "index": i,
            "task_id": task,
            "kernel": kernel,
            "func_id": func_ids.setdefault(kernel, len(func_ids)),
            "task_name": kernel,
            "arg_index": arg,
            "role": role,
            "stage": stage,
            "start_offset": 0,
            "truncated": i in truncate,
            "overwritten": i in overwrite,
        }
        if isinstance(val, torch.Tensor):
            shape = list(val.shape)
            strides = [0] * len(shape)
            acc = 1
            for k in range(len(shape) - 1, -1, -1):
                strides[k], acc = acc, acc * shape[k]
            payload = _le_bytes(val)[: truncate.get(i)]
            rec |= {"kind": "tensor", "dtype": SPEC_DTYPES[val.dtype], "shape": shape, "strides": strides}
            rec |= {"tensor": name, "value": None}
            if level == 3:
                rec |= {"bin_offset": None, "bin_size": 0}
            else:
                rec |= {"bin_offset": len(blob), "bin_size": len(payload)}
                blob += payload
        else:
            rec |= {"kind": "scalar", "dtype": "i32" if isinstance(val, int) else "f32", "shape": []}
            rec |= {"strides": [], "tensor": None, "value": val, "bin_offset": None, "bin_size": 0}
        records.append(rec)
    manifest = {
        "format": "tilescope-tensor-dump",
        "version": 1,
        "program": program,
        "level": level,
        "bin_file": "tensor_dump.bin",
        "bin_size": len(blob),
        "num_workers": 2,
        "status": status,
        "error": error,
        "counts": counts,
        "truncated": len(truncate),
        "overwritten": len(overwrite),
        "dropped_records": 0,
        "records": records,
    }
    manifest |= counters or {}
    (out / "tensor_dump.json").write_text(json.dumps(manifest, indent=1))
    (out / "tensor_dump.bin").write_bytes(bytes(blob))
    return manifest


X = torch.arange(64 * 128, dtype=torch.float32).reshape(64, 128) / 7
Y = torch.linspace(-1, 1, 24, dtype=torch.float32).reshape(4, 6)
ACC = torch.zeros(3, 5)
ACC_AFTER = ACC.clone()
ACC_AFTER[1, 2], ACC_AFTER[2, 4] = 1.5, -0.25


def _entries():
    return [
        (0, "add", "before_dispatch", "input", 0, X, "x"),
        (0, "add", "before_dispatch", "input", 1, X * 2, "y"),
        (0, "add", "after_completion", "output", 2, X * 3, "tmp0"),
        (1, "scale", "before_dispatch", "input", 0, Y, "tmp0"),
        (1, "scale", "before_dispatch", "scalar", 2, 0.5, None),
        (1, "scale", "after_completion", "output", 1, Y * 0.5, "out"),
        (2, "accum", "before_dispatch", "inout", 0, ACC, "acc"),
        (2, "accum", "after_completion", "inout", 0, ACC_AFTER, "acc"),
    ]


@pytest.fixture
def build(tmp_path):
    """A build dir with a full (level 2) dump at dfx_outputs/tensor_dump."""
    b = tmp_path / "build_output" / "_jit_prog_20260101_000000"
    write_dump(b / "dfx_outputs" / "tensor_dump", _entries())
    return b


def _cli(argv, capsys):
    parser = argparse.ArgumentParser(prog="tilescope")
    dv.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dump", *argv])
    rc = args.fn(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _table_rows(out):
    """Table lines (those starting with a record index) split into cells."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["index", "task"])
    rows = []
    for ln in lines[start + 1 :]:
        if not ln.strip():
            break
        rows.append(ln.split())
    return rows


# -- loading and decoding ------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["build", "dfx", "dump", "manifest"])
def test_load_from_every_kind_of_path(build, where):
    dump_dir = build / "dfx_outputs" / "tensor_dump"
    path = {
        "build": build,
        "dfx": build / "dfx_outputs",
        "dump": dump_dir,
        "manifest": dump_dir / "tensor_dump.json",
    }[where]
    d = load_dump(path)
    assert d.dir == dump_dir and d.program == "prog" and d.level == 2 and d.num_workers == 2
    assert len(d.records) == 8 and d.problems == ()
    assert [r.index for r in d.records] == list(range(8))
    assert all(r.problems == () for r in d.records)


def test_default_dir_is_newest_build_with_a_dump(tmp_path, monkeypatch, capsys):
    base = tmp_path / "builds"
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(base))
    old = base / "_jit_a_1" / "dfx_outputs" / "tensor_dump"
    write_dump(old, _entries()[:2], program="old")
    new = base / "_jit_b_2" / "dfx_outputs" / "tensor_dump"
    write_dump(new, _entries()[:3], program="new")
    (base / "_jit_c_3").mkdir()  # newer, but no dump
    os.utime(old / "tensor_dump.json", (1, 1))
    assert load_dump().program == "new"
    rc, out, _ = _cli([], capsys)
    assert rc == 0 and f"tensor dump {new}" in out


def test_no_dump_anywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(tmp_path / "nothing"))
    rc, out, err = _cli([], capsys)
    assert rc == 1 and out == ""
    assert err.startswith("tilescope dump: error: no tensor dump under") and "--dump-tensor" in err
    assert err.count("\n") == 1


def test_decode_values_round_trip(build):
    d = load_dump(build)
    assert torch.equal(d.tensor(0), X)
    assert torch.equal(d.tensor(d.records[1]), X * 2)
    assert torch.equal(d.tensor(5), Y * 0.5)
    s = d.tensor(4)
    assert s.dtype == torch.float32 and s.shape == () and s.item() == 0.5


@pytest.mark.parametrize("dtype", list(SPEC_DTYPES))
def test_decode_every_dtype(tmp_path, dtype):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        t = torch.rand(3, 4, 5, generator=g) > 0.5
    elif dtype.is_floating_point:
        t = (torch.randn(3, 4, 5, generator=g) * 100).to(dtype)
    else:
        info = torch.iinfo(dtype)
        t = torch.randint(max(info.min, -(2**40)), min(info.max, 2**40), (3, 4, 5), generator=g, dtype=dtype)
    write_dump(tmp_path, [(0, "k", "before_dispatch", "input", 0, t, "t")])
    d = load_dump(tmp_path)
    assert d.records[0].dtype == SPEC_DTYPES[dtype]
    got = d.tensor(0)
    assert got.dtype == dtype and got.shape == t.shape and torch.equal(got, t)


def test_bf16_decoding_from_hand_written_bit_patterns(tmp_path):
    # bf16 bit patterns written by hand: 1.5 = 0x3FC0, -2.0 = 0xC000, 0.0078125 = 0x3C00, inf = 0x7F80
    bits = [0x3FC0, 0xC000, 0x3C00, 0x7F80]
    write_dump(
        tmp_path, [(0, "k", "before_dispatch", "input", 0, torch.zeros(2, 2, dtype=torch.bfloat16), "t")]
    )
    (tmp_path / "tensor_dump.bin").write_bytes(struct.pack("<4H", *bits))
    t = load_dump(tmp_path).tensor(0)
    assert t.dtype == torch.bfloat16
    assert t.float().tolist() == [[1.5, -2.0], [0.0078125, float("inf")]]


def test_f32_decoding_from_hand_written_little_endian(tmp_path):
    write_dump(tmp_path, [(0, "k", "before_dispatch", "input", 0, torch.zeros(3), "t")])
    (tmp_path / "tensor_dump.bin").write_bytes(bytes.fromhex("0000c03f000000c00000807f"))
    assert load_dump(tmp_path).tensor(0).tolist() == [1.5, -2.0, float("inf")]


# -- listing -------------------------------------------------------------------------------------


def test_listing_every_record(build, capsys):
    rc, out, err = _cli([str(build)], capsys)
    assert rc == 0 and err == ""
    assert f"tensor dump {build / 'dfx_outputs' / 'tensor_dump'}" in out
    assert "program prog: level 2 (full), 8 records" in out
    rows = _table_rows(out)
    assert [r[0] for r in rows] == [str(i) for i in range(8)]
    assert rows[0] == [
        "0",
        "0",
        "add",
        "before",
        "input",
        "0",
        "x",  # a manifest without regions: the tensor's name
        "tensor",
        "f32",
        "[64,128]",
        str(64 * 128 * 4),
    ]
    assert rows[4] == ["4", "1", "scale", "before", "scalar", "2", "-", "scalar", "f32", "[]", "0.5"]
    assert rows[7][:5] == ["7", "2", "accum", "after", "inout"]
    assert (
        "by stage/role: before_dispatch: inout 1, input 3, scalar 1; after_completion: inout 1, output 2"
        in out
    )
    assert "truncated 0, overwritten 0, dropped_records 0" in out
    # an inout before/after pair exists: the hint offers its diff
    assert out.rstrip().splitlines()[-1].startswith("next: ") and "--diff 6 7" in out


def test_listing_shows_lost_records_and_failed_runs(tmp_path, capsys):
    write_dump(
        tmp_path,
        _entries(),
        status=3,
        error="kernel scale raised",
        truncate={0: 100},
        overwrite=(2,),
        counters={"dropped_records": 4},
    )
    rc, out, _ = _cli([str(tmp_path)], capsys)
    assert rc == 0
    assert "run FAILED (status 3): kernel scale raised" in out
    assert "truncated 1, overwritten 1, dropped_records 4" in out
    assert "some payloads or records were lost" in out
    rows = {r[0]: r for r in _table_rows(out)}
    assert rows["0"][-1] == "truncated:100B"
    assert rows["2"][-1] == "overwritten"


def test_module_entry_point(build):
    r = subprocess.run(
        [sys.executable, "-m", "tilescope.tools.dump_viewer", str(build), "--task", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "3 of 8 records match --task 1" in r.stdout


# -- filters -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "filters", "expected"),
    [
        (["--task", "1"], {"task": 1}, [3, 4, 5]),
        (["--kernel", "accum"], {"kernel": "accum"}, [6, 7]),
        (["--stage", "before"], {"stage": "before"}, [0, 1, 3, 4, 6]),
        (["--stage", "after_completion"], {"stage": "after_completion"}, [2, 5, 7]),
        (["--role", "inout"], {"role": "inout"}, [6, 7]),
        (["--role", "scalar"], {"role": "scalar"}, [4]),
        (["--arg", "0"], {"arg": 0}, [0, 3, 6, 7]),
        (["-i", "5"], {"index": 5}, [5]),
        (["-i", "7", "-i", "2"], {"index": [7, 2]}, [2, 7]),
        (["--task", "0", "--stage", "after"], {"task": 0, "stage": "after"}, [2]),
        (
            ["--kernel", "add", "--role", "input", "--arg", "1"],
            {"kernel": "add", "role": "input", "arg": 1},
            [1],
        ),
    ],
)
def test_filters(build, capsys, argv, filters, expected):
    d = load_dump(build)
    assert [r.index for r in select(d, **filters)] == expected
    rc, out, _ = _cli([str(build), *argv], capsys)
    assert rc == 0
    assert [int(r[0]) for r in _table_rows(out)] == expected
    assert f"{len(expected)} of 8 records match" in out
    assert "next: add --export" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "9"], "task 9 is not in the dump; tasks: 0-2"),
        (["--kernel", "mul"], "kernel 'mul' is not in the dump; kernels: accum, add, scale"),
        (
            ["--stage", "during"],
            "stage 'during' is not one of before, after, probe (before_dispatch, after_completion, probe)",
        ),
        (["--role", "in"], "role 'in' is not one of input, output, inout, scalar"),
        (["--arg", "5"], "arg 5 is not in the dump; arg indices: 0-2"),
        (["-i", "8"], "record index 8 out of range: the dump has records 0-7"),
        (["--diff", "0", "99"], "record index 99 out of range"),
        (["--limit", "-1"], "--limit -1: expected a count >= 0"),
    ],
)
def test_invalid_filter_values(build, capsys, argv, message):
    rc, out, err = _cli([str(build), *argv], capsys)
    assert rc == 1 and out == ""
    assert err.startswith("tilescope dump: error: ") and message in err
    assert err.count("\n") == 1


def test_filters_that_match_nothing(build, capsys):
    rc, out, _ = _cli([str(build), "--task", "1", "--role", "inout"], capsys)
    assert rc == 1
    assert "no record matches --task 1 --role inout; drop a filter" in out


# -- export --------------------------------------------------------------------------------------


def test_export_text_and_pt(build, capsys):
    rc, out, _ = _cli([str(build), "-i", "0", "--export"], capsys)
    assert rc == 0
    txt_dir = build / "dfx_outputs" / "tensor_dump" / "txt"
    txt, pt = txt_dir / "r0000_t0_add_before_input_a0.txt", txt_dir / "r0000_t0_add_before_input_a0.pt"
    assert f"wrote {txt}" in out and f"wrote {pt}" in out
    assert "exported 1 record(s), 1 .pt file(s)" in out
    loaded = torch.load(pt, weights_only=True)
    assert loaded.dtype == torch.float32 and torch.equal(loaded, X)

    text = txt.read_text()
    head, grid, details = text.split("\n\n")
    assert "# stage: before_dispatch role: input arg: 0 kind: tensor tensor: x" in head
    assert "# dtype: f32 shape: [64, 128] strides: [128, 1] start_offset: 0" in head
    assert "# numel: 8192 bytes: 32768 stored: 32768 bin_offset: 0" in head
    assert "# flags: none" in head
    g = grid.splitlines()
    assert g[0] == "overview:"
    assert g[1].split() == ["0", "1", "2", "...", "125", "126", "127"]
    assert len(g) == 2 + 7  # 3 rows, "...", 3 rows
    row1 = g[3].split()
    assert row1[0] == "1" and float(row1[1]) == pytest.approx(X[1, 0].item(), rel=1e-5) and row1[4] == "..."
    assert float(row1[-1]) == pytest.approx(X[1, 127].item(), rel=1e-5)
    assert g[5].split()[0] == "..." and g[-1].split()[0] == "63"
    lines = details.splitlines()
    assert lines[0] == "elements ([index] value, row-major): 8192 of 8192"
    assert len(lines) == 1 + 8192
    assert lines[1 + 129] == f"[1, 1] {X[1, 1].item():.9g}"
    last = lines[-1].split()[-1]  # 9 significant digits read back to the same f32
    assert torch.tensor(float(last), dtype=torch.float32).item() == X[63, 127].item()


def test_export_filtered_records_to_a_dir_with_limit(build, tmp_path, capsys):
    out_dir = tmp_path / "exported"
    rc, out, _ = _cli([str(build), "--task", "1", "--export", str(out_dir), "--limit", "5"], capsys)
    assert rc == 0
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == sorted(
        f"{stem}.{ext}"
        for stem in (
            "r0003_t1_scale_before_input_a0",
            "r0004_t1_scale_before_scalar_a2",
            "r0005_t1_scale_after_output_a1",
        )
        for ext in ("txt", "pt")
    )
    text = (out_dir / "r0003_t1_scale_before_input_a0.txt").read_text()
    assert "elements ([index] value, row-major): 5 of 24 (--limit)" in text
    assert text.rstrip().splitlines()[-1] == f"[0, 4] {Y[0, 4].item():.9g}"
    assert "[0, 5]" not in text.split("elements")[1]
    g = text.split("\n\n")[1].splitlines()
    assert len(g) == 2 + 4 and "..." not in g[1]  # a 4 x 6 tensor is shown whole
    scalar = (out_dir / "r0004_t1_scale_before_scalar_a2.txt").read_text()
    assert "[] 0.5" in scalar
    assert torch.load(out_dir / "r0004_t1_scale_before_scalar_a2.pt", weights_only=True).item() == 0.5


def test_export_grid_of_4d_and_1d(tmp_path):
    t4 = torch.arange(5 * 2 * 3 * 4, dtype=torch.int32).reshape(5, 2, 3, 4)
    t1 = torch.arange(10, dtype=torch.int64)
    write_dump(
        tmp_path,
        [(0, "k", "before_dispatch", "input", 0, t4, "a"), (0, "k", "before_dispatch", "input", 1, t1, "b")],
    )
    d = load_dump(tmp_path)
    text, _ = dv.record_text(d, d.records[0])
    grid = text.split("\n\n")[1].splitlines()
    assert grid[0] == "overview (last two dims of [5, 2, 3, 4]):"
    # 10 leading slices: first 3, a "..." line, last 3
    heads = [ln for ln in grid if ln.startswith("[") or ln.startswith("... (")]
    assert heads == [
        "[0, 0, :, :]",
        "[0, 1, :, :]",
        "[1, 0, :, :]",
        "... (4 slices not shown)",
        "[3, 1, :, :]",
        "[4, 0, :, :]",
        "[4, 1, :, :]",
    ]
    assert text.rstrip().splitlines()[-1] == "[4, 1, 2, 3] 119"
    text1, _ = dv.record_text(d, d.records[1])
    g1 = text1.split("\n\n")[1].splitlines()
    assert g1[1].split() == ["0", "1", "2", "...", "7", "8", "9"]
    assert g1[2].split() == ["0", "1", "2", "...", "7", "8", "9"]


def test_export_of_truncated_record_keeps_the_stored_elements(tmp_path):
    write_dump(tmp_path, [(0, "k", "after_completion", "output", 0, Y, "o")], truncate={0: 10 * 4 + 2})
    d = load_dump(tmp_path)
    r = d.records[0]
    assert r.truncated and r.problems == ()
    with pytest.raises(DumpError, match="record 0 .* is truncated: 42 of 96 bytes stored"):
        d.tensor(r)
    part = d.tensor(r, partial=True)
    assert torch.equal(part, Y.reshape(-1)[:10])
    text, t = dv.record_text(d, r)
    assert "# truncated: 10 of 24 elements stored" in text
    assert text.rstrip().splitlines()[-1] == f"[1, 3] {Y[1, 3].item():.9g}"


# -- diff ----------------------------------------------------------------------------------------


def test_diff_inout_before_after(build, capsys):
    rc, out, _ = _cli([str(build), "--diff", "6", "7"], capsys)
    assert rc == 0
    assert "A = record 6 (task 2 accum, before_dispatch, inout arg 0 acc)" in out
    assert "shape [3, 5] == [3, 5]; dtype f32 == f32" in out
    assert "differing elements: 2 of 15 (13.33%)" in out
    assert "max abs diff 1.5 at [1, 2] (A 0, B 1.5)" in out
    assert "max rel diff 1 at [1, 2]" in out
    assert "  [1, 2] A 0  B 1.5\n  [2, 4] A 0  B -0.25" in out
    x = dv.diff(load_dump(build), 6, 7)
    assert (x.differing, x.max_abs, x.max_abs_at[0]) == (2, 1.5, (1, 2))


def test_diff_identical_nan_and_shape_mismatch(tmp_path, capsys):
    a = torch.tensor([[1.0, float("nan")], [3.0, 4.0]])
    b = torch.tensor([[1.0, float("nan")], [3.0, float("nan")]])
    write_dump(
        tmp_path,
        [
            (0, "k", "before_dispatch", "inout", 0, a, "t"),
            (0, "k", "before_dispatch", "input", 1, a.clone(), "u"),
            (0, "k", "after_completion", "inout", 0, b, "t"),
            (0, "k", "after_completion", "output", 2, torch.zeros(4), "v"),
        ],
    )
    d = load_dump(tmp_path)
    assert dv.diff(d, 0, 1).differing == 0  # NaN equals NaN
    rc, out, _ = _cli([str(tmp_path), "--diff", "0", "1"], capsys)
    assert rc == 0 and "the two records are identical" in out
    x = dv.diff(d, 0, 2)
    assert x.differing == 1 and x.max_abs == float("inf") and x.first[0][0] == (1, 1)
    rc, _, err = _cli([str(tmp_path), "--diff", "0", "3"], capsys)
    assert rc == 1 and "shapes differ: record 0 is [2, 2], record 3 is [4]" in err
    rc, _, err = _cli([str(tmp_path), "--diff", "0", "1", "--task", "0"], capsys)
    assert rc == 1 and "--diff takes two record indices" in err


# -- level 3 (metadata only) ---------------------------------------------------------------------


def test_level3_metadata_only(tmp_path, capsys):
    write_dump(tmp_path, _entries(), level=3)
    d = load_dump(tmp_path)
    assert d.level == 3 and d.bin_actual == 0 and d.problems == ()
    assert all(r.problems == () and not r.has_payload for r in d.records)
    with pytest.raises(DumpError, match=r"record 0 .* has no payload \(a level 3 \(metadata only\) dump\)"):
        d.tensor(0)
    assert d.tensor(4).item() == 0.5  # scalars keep their value
    rc, out, _ = _cli([str(tmp_path)], capsys)
    assert rc == 0 and "level 3 (metadata only)" in out
    rows = _table_rows(out)
    assert rows[0][-2:] == [str(64 * 128 * 4), "meta"] and rows[4][-1] == "0.5"
    rc, out, _ = _cli([str(tmp_path), "-i", "0", "-i", "4", "--export"], capsys)
    assert rc == 0
    assert "no values for record 0" in out and "exported 2 record(s), 1 .pt file(s)" in out
    txt = (tmp_path / "txt" / "r0000_t0_add_before_input_a0.txt").read_text()
    assert "# no values: record 0" in txt and "# dtype: f32 shape: [64, 128]" in txt
    assert not (tmp_path / "txt" / "r0000_t0_add_before_input_a0.pt").exists()


# -- corrupt input -------------------------------------------------------------------------------


def _one_line_error(path, capsys, *extra):
    rc, out, err = _cli([str(path), *extra], capsys)
    assert rc == 1 and out == ""
    assert err.startswith("tilescope dump: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_missing_manifest(tmp_path, capsys):
    err = _one_line_error(tmp_path, capsys)
    assert "no tensor_dump.json in" in err and "--dump-tensor" in err
    (tmp_path / "tensor_dump.bin").write_bytes(b"\0" * 8)
    err = _one_line_error(tmp_path, capsys)
    assert "has tensor_dump.bin but no tensor_dump.json" in err
    err = _one_line_error(tmp_path / "nope", capsys)
    assert "nope does not exist" in err


def test_invalid_json(build, capsys):
    m = build / "dfx_outputs" / "tensor_dump" / "tensor_dump.json"
    m.write_text(m.read_text()[:200])
    err = _one_line_error(build, capsys)
    assert f"{m} is not valid JSON (line " in err and "re-run with --dump-tensor" in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "something-else"}, "format is 'something-else', not 'tilescope-tensor-dump'"),
        ({"version": 2}, "is tensor dump version 2; this viewer reads version 1"),
        ({"records": None}, "has no records list"),
    ],
)
def test_manifest_that_is_not_a_dump(tmp_path, capsys, change, message):
    manifest = write_dump(tmp_path, _entries())
    (tmp_path / "tensor_dump.json").write_text(json.dumps(manifest | change))
    assert message in _one_line_error(tmp_path, capsys)


def test_manifest_missing_fields(tmp_path, capsys):
    manifest = write_dump(tmp_path, _entries())
    for k in ("level", "counts", "dropped_records"):
        del manifest[k]
    del manifest["records"][3]["dtype"]
    del manifest["records"][5]["shape"]
    (tmp_path / "tensor_dump.json").write_text(json.dumps(manifest))
    d = load_dump(tmp_path)
    assert d.problems == ("manifest lacks field(s) level, counts, dropped_records; shown as unknown",)
    assert d.records[3].problems == ("missing field(s) dtype",)
    assert d.records[5].problems == ("missing field(s) shape",)
    assert torch.equal(d.tensor(0), X)
    with pytest.raises(DumpError, match=r"record 3 .* cannot be decoded: missing field\(s\) dtype"):
        d.tensor(3)
    rc, out, _ = _cli([str(tmp_path)], capsys)
    assert rc == 0
    assert "problem: manifest lacks field(s) level, counts, dropped_records" in out
    assert "BAD record 3 (task 1 scale, before_dispatch, input arg 0 tmp0): missing field(s) dtype" in out
    rows = {r[0]: r for r in _table_rows(out)}
    assert rows["3"][-1] == "BAD" and rows["0"][-1] == str(64 * 128 * 4)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("shape", [1, 2, 3, 4, 5], "shape [1, 2, 3, 4, 5] has ndim 5 > 4"),
        ("shape", [4, -6], "shape [4, -6] has a negative dim"),
        ("shape", "4x6", "shape '4x6' is not a list of ints"),
        ("dtype", "f8", "dtype 'f8' is not one of f32, f16, bf16"),
        ("role", "in", "role 'in' is not one of input, output, inout, scalar"),
        (
            "bin_size",
            95,
            "bin_size 95 but shape [4, 6] of f32 needs 96 bytes (and the record is not marked truncated)",
        ),
        ("bin_offset", -4, "bin_offset -4 is not a byte offset"),
        ("task_id", "1", "task_id is '1', not an int"),
    ],
)
def test_bad_record_is_flagged_and_the_rest_still_work(tmp_path, capsys, field, value, message):
    manifest = write_dump(tmp_path, _entries())
    manifest["records"][3][field] = value
    (tmp_path / "tensor_dump.json").write_text(json.dumps(manifest))
    d = load_dump(tmp_path)
    assert len(d.records[3].problems) == 1 and message in d.records[3].problems[0]
    assert [r.index for r in d.records if r.problems] == [3]
    assert torch.equal(d.tensor(5), Y * 0.5)
    rc, out, _ = _cli([str(tmp_path)], capsys)
    assert rc == 0 and "BAD record 3 " in out and message in out
    rc, out, _ = _cli([str(tmp_path), "-i", "3", "-i", "5", "--export"], capsys)
    assert rc == 0 and "no values for record 3" in out and "exported 2 record(s), 1 .pt file(s)" in out


def test_truncated_bin_file(tmp_path, capsys):
    write_dump(tmp_path, _entries())
    b = tmp_path / "tensor_dump.bin"
    data = b.read_bytes()
    cut = 64 * 128 * 4 * 2 + 10  # records 0 and 1 whole, record 2 cut short, the rest gone
    b.write_bytes(data[:cut])
    d = load_dump(tmp_path)
    assert d.problems == (
        f"tensor_dump.bin is {cut} bytes but the manifest says {len(data)}: the file was cut short",
    )
    bad = {r.index: r.problems for r in d.records if r.problems}
    assert sorted(bad) == [2, 3, 5, 6, 7]
    off = 64 * 128 * 4 * 2
    assert bad[2] == (
        f"payload bytes [{off}, {off + 64 * 128 * 4}) lie past the end of tensor_dump.bin ({cut} bytes): the file is truncated",
    )
    assert torch.equal(d.tensor(1), X * 2) and d.tensor(4).item() == 0.5
    rc, out, _ = _cli([str(tmp_path)], capsys)
    assert rc == 0 and "the file was cut short" in out and out.count("BAD record") == 5


def test_bin_size_mismatch_and_missing_bin(tmp_path, capsys):
    write_dump(tmp_path, _entries())
    b = tmp_path / "tensor_dump.bin"
    size = b.stat().st_size
    b.write_bytes(b.read_bytes() + b"\0" * 16)
    d = load_dump(tmp_path)
    assert d.problems == (f"tensor_dump.bin is {size + 16} bytes but the manifest says {size}",)
    assert all(not r.problems for r in d.records) and torch.equal(d.tensor(7), ACC_AFTER)
    b.unlink()
    d = load_dump(tmp_path)
    assert d.problems == (f"tensor_dump.bin is missing but the manifest says it holds {size} bytes",)
    assert d.records[0].problems == ("payload in tensor_dump.bin, which is missing",)
    rc, out, _ = _cli([str(tmp_path), "--diff", "6", "7"], capsys)
    assert rc == 1


def test_record_index_mismatch_and_order_are_reported(tmp_path):
    manifest = write_dump(tmp_path, _entries())
    manifest["records"][1]["index"] = 9
    manifest["records"][0], manifest["records"][2] = manifest["records"][2], manifest["records"][0]
    (tmp_path / "tensor_dump.json").write_text(json.dumps(manifest))
    d = load_dump(tmp_path)
    assert "record at position 1 says index 9; listed as 1" in d.problems
    assert "record at position 0 says index 2; listed as 0" in d.problems
    assert "records are not sorted by (task_id, stage, arg_index)" in d.problems
    assert torch.equal(d.tensor(0), X * 3)  # decoding follows the record, not its position


def test_odd_manifests_are_reported_not_raised(tmp_path, capsys):
    m = tmp_path / "tensor_dump.json"
    m.write_text("[1, 2]")
    assert "a JSON list, not an object" in _one_line_error(tmp_path, capsys)
    m.write_bytes(b"\xff\xfe")
    assert "cannot read" in _one_line_error(tmp_path, capsys)
    m.write_text(json.dumps({"format": "tilescope-tensor-dump", "version": 1, "records": []}))
    rc, out, _ = _cli([str(tmp_path)], capsys)
    assert rc == 0 and "0 records" in out and "the dump holds no records" in out
    records = [5, {"index": 1, "shape": [True, 2]}]
    m.write_text(
        json.dumps({"format": "tilescope-tensor-dump", "version": 1, "records": records, "level": 2})
    )
    d = load_dump(tmp_path)
    assert d.records[0].problems == ("not a JSON object but 5",)
    assert "shape [True, 2] is not a list of ints" in d.records[1].problems[-1]
    rc, out, _ = _cli([str(tmp_path), "-i", "0", "--export"], capsys)
    assert rc == 0 and "r0000_t-1_______a-1.txt" in out
