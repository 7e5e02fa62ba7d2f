"""Runtime core: dependency inference (RAW/WAW/WAR on boxes), explicit deps, scheduling order,
errors, intermediate tensors, GIL release and reused runtimes (clean state between runs, pools,
threads, process exit and fork), through hand-written C++ orchestrations."""

from __future__ import annotations

import ctypes
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
from helpers import native_entries

from tilescope.errors import ArgumentError, RuntimeFailure
from tilescope.ir import dtypes
from tilescope.ir.types import Direction
from tilescope.runtime import abi, collect, graph, library, records
from tilescope.runtime.graph import scalar_arg, tensor_arg
from tilescope.runtime.records import EdgeRecord
from tilescope.runtime.run_config import Recording, RunConfig

pytestmark = pytest.mark.slow  # g++ builds, or whole programs run

PRIME = 1_000_003

KERNELS = {
    "noop": """
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) { (void)args; }
""",
    # args: INOUT int64 2-D region, scalar a, scalar b:  r = (r * a + b) % PRIME
    "affine": """
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) {
    const ts_tensor &r = args[0].u.t;
    const int64_t a = args[1].u.s.v.i, b = args[2].u.s.v.i;
    int64_t *base = static_cast<int64_t *>(r.data) + r.offset;
    for (int64_t i = 0; i < r.shape[0]; ++i)
        for (int64_t j = 0; j < r.shape[1]; ++j) {
            int64_t &v = base[i * r.strides[0] + j * r.strides[1]];
            v = (v * a + b) % 1000003;
        }
}
""",
    # args: IN int64 2-D region src, OUT region dst of the same shape, scalar c:  dst = (src + c) % PRIME
    "copy_add": """
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) {
    const ts_tensor &s = args[0].u.t, &d = args[1].u.t;
    const int64_t c = args[2].u.s.v.i;
    const int64_t *sb = static_cast<const int64_t *>(s.data) + s.offset;
    int64_t *db = static_cast<int64_t *>(d.data) + d.offset;
    for (int64_t i = 0; i < s.shape[0]; ++i)
        for (int64_t j = 0; j < s.shape[1]; ++j)
            db[i * d.strides[0] + j * d.strides[1]] = (sb[i * s.strides[0] + j * s.strides[1]] + c) % 1000003;
}
""",
    # args: scalar microseconds to busy-wait
    "spin": """
#include <chrono>
#include <tilescope/abi.h>
extern "C" void kernel_entry(const ts_arg *args) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(args[0].u.s.v.i);
    while (std::chrono::steady_clock::now() < until) {}
}
""",
}

ORCH_HEAD = """
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
"""
ORCH_TAIL = """
    return orch.status();
}
"""


def orch_source(body: str) -> str:
    return ORCH_HEAD + body + ORCH_TAIL


ORCHESTRATIONS = {
    # 8x8 f32 tensor: partially overlapping boxes exercise RAW, WAW, WAR and pruning.
    "overlap": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    ts::Task t0 = orch.task(0, "w0"); t0.add_output(x.slice({{0, 4}, {0, 4}}), {4, 4}); orch.submit(t0);
    ts::Task t1 = orch.task(0, "r1"); t1.add_input(x.slice({{2, 6}, {2, 6}}), {4, 4}); orch.submit(t1);
    ts::Task t2 = orch.task(0, "w2"); t2.add_output(x.slice({{3, 8}, {3, 8}}), {5, 5}); orch.submit(t2);
    ts::Task t3 = orch.task(0, "r3"); t3.add_input(x.slice({{4, 8}, {0, 2}}), {4, 2}); orch.submit(t3);
    ts::Task t4 = orch.task(0, "rw4"); t4.add_inout(x.slice({{0, 2}, {6, 8}}), {2, 2}); orch.submit(t4);
    ts::Task t5 = orch.task(0, "w5"); t5.add_output(x, {8, 8}); orch.submit(t5);
    ts::Task t6 = orch.task(0, "r6"); t6.add_input(x.slice({{1, 2}, {1, 2}}), {1, 1}); orch.submit(t6);
"""),
    # Column blocks of a row-major 8x8 matrix: byte ranges interleave, boxes do not intersect.
    "columns": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    ts::Task t0 = orch.task(0, "left"); t0.add_output(x.slice({{0, 8}, {0, 4}}), {8, 4}); orch.submit(t0);
    ts::Task t1 = orch.task(0, "right"); t1.add_output(x.slice({{0, 8}, {4, 8}}), {8, 4}); orch.submit(t1);
    ts::Task t2 = orch.task(0, "middle"); t2.add_input(x.slice({{0, 8}, {2, 6}}), {8, 4}); orch.submit(t2);
    ts::Task t3 = orch.task(0, "left_again"); t3.add_input(x.slice({{0, 8}, {0, 4}}), {8, 4}); orch.submit(t3);
    ts::Task t4 = orch.task(0, "top"); t4.add_output(x.slice({{0, 4}, {0, 8}}), {4, 8}); orch.submit(t4);
"""),
    # args 0, 1, 2 are views of one storage: base, base.t(), base[4:8].
    "aliases": orch_source("""
    ts::TensorHandle a = orch.tensor_arg(0), b = orch.tensor_arg(1), c = orch.tensor_arg(2);
    ts::Task t0 = orch.task(0, "rows01"); t0.add_output(a.slice({{0, 2}, {0, 8}}), {2, 8}); orch.submit(t0);
    ts::Task t1 = orch.task(0, "cols01_of_t"); t1.add_input(b.slice({{0, 8}, {0, 2}}), {8, 2}); orch.submit(t1);
    ts::Task t2 = orch.task(0, "cols45_of_t"); t2.add_input(b.slice({{0, 8}, {4, 6}}), {8, 2}); orch.submit(t2);
    ts::Task t3 = orch.task(0, "rows45"); t3.add_output(c.slice({{0, 2}, {0, 8}}), {2, 8}); orch.submit(t3);
"""),
    # Integer indexing: a row and a column of an 8x8 matrix as 1-D regions.
    "squeeze": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    ts::Task t0 = orch.task(0, "row3"); t0.add_output(x.slice({{3, 4}, {0, 8}}).squeeze({0}), {8}); orch.submit(t0);
    ts::Task t1 = orch.task(0, "col2"); t1.add_input(x.slice({{0, 8}, {2, 3}}).squeeze({1}), {8}); orch.submit(t1);
    ts::Task t2 = orch.task(0, "row4"); t2.add_input(x.slice({{4, 5}, {0, 8}}).squeeze({0}), {8}); orch.submit(t2);
    ts::Task t3 = orch.task(0, "bad"); t3.add_input(x.slice({{4, 5}, {0, 8}}).squeeze({1}), {1}); orch.submit(t3);
"""),
    "explicit": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0), y = orch.tensor_arg(1);
    ts::Task t0 = orch.task(0, "write_x"); t0.add_output(x, {4, 4}); int64_t id0 = orch.submit(t0);
    ts::Task t1 = orch.task(0, "write_y"); t1.add_output(y, {4, 4}); t1.depends_on(id0); orch.submit(t1);
    ts::Task t2 = orch.task(0, "read_x"); t2.add_input(x, {4, 4}); t2.depends_on(id0); t2.depends_on(id0);
    orch.submit(t2);
"""),
    # A task reading and writing the same region, then one reading two overlapping regions.
    "self": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    ts::Task t0 = orch.task(0, "in_and_out");
    t0.add_input(x.slice({{0, 4}, {0, 8}}), {4, 8}); t0.add_output(x.slice({{0, 4}, {0, 8}}), {4, 8});
    orch.submit(t0);
    ts::Task t1 = orch.task(0, "inout"); t1.add_inout(x.slice({{2, 6}, {0, 8}}), {4, 8}); orch.submit(t1);
    ts::Task t2 = orch.task(0, "two_reads");
    t2.add_input(x.slice({{2, 3}, {0, 8}}), {1, 8}); t2.add_input(x.slice({{3, 5}, {0, 8}}), {2, 8});
    orch.submit(t2);
"""),
    # A plan (int64 [n, 11]) drives tasks on X and Y (int64 [64, 64]); see make_plan().
    "plan": orch_source("""
    ts::TensorHandle bufs[2] = {orch.tensor_arg(0), orch.tensor_arg(1)};
    const ts_tensor plan = orch.tensor_arg(2).desc();
    const int64_t *p = static_cast<const int64_t *>(plan.data) + plan.offset;
    for (int64_t i = 0; i < plan.shape[0]; ++i, p += plan.strides[0]) {
        const int64_t kind = p[0], h = p[7], w = p[8];
        ts::TensorHandle dst = bufs[p[4]].slice({{p[5], p[5] + h}, {p[6], p[6] + w}});
        if (kind == 0) {
            ts::Task t = orch.task(0, "affine");
            t.add_inout(dst, {h, w});
            t.add_scalar(TS_I64, p[9]);
            t.add_scalar(TS_I64, p[10]);
            orch.submit(t);
        } else {
            ts::Task t = orch.task(1, "copy_add");
            t.add_input(bufs[p[1]].slice({{p[2], p[2] + h}, {p[3], p[3] + w}}), {h, w});
            t.add_output(dst, {h, w});
            t.add_scalar(TS_I64, p[9]);
            orch.submit(t);
        }
    }
"""),
    # arg 0: number of tasks, arg 1: microseconds each; a chain through an intermediate.
    "spin_chain": orch_source("""
    const int64_t n = orch.scalar_arg<int64_t>(0);
    const double us = orch.scalar_arg<double>(1);
    ts::TensorHandle token = orch.create_tensor(TS_F32, {1});
    for (int64_t i = 0; i < n; ++i) {
        ts::Task t = orch.task(0, "spin");
        t.add_scalar(TS_I64, us);
        t.add_inout(token, {1});
        orch.submit(t);
    }
"""),
    "bad_func_id": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    ts::Task ok = orch.task(0, "fine"); ok.add_output(x, {8, 8}); orch.submit(ok);
    ts::Task bad = orch.task(3, "bogus"); bad.add_input(x, {8, 8}); orch.submit(bad);
    ts::Task later = orch.task(0, "never"); later.add_input(x, {8, 8}); orch.submit(later);
"""),
    # Writes each submit's return value into arg 1 (int64 [3]) so the test can see them.
    "oob_slice": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    int64_t *ids = static_cast<int64_t *>(orch.tensor_arg(1).desc().data);
    ts::Task t0 = orch.task(0, "fine"); t0.add_output(x.slice({{0, 4}, {0, 4}}), {4, 4}); ids[0] = orch.submit(t0);
    ts::Task t1 = orch.task(0, "oob"); t1.add_input(x.slice({{0, 4}, {6, 10}}), {4, 4}); ids[1] = orch.submit(t1);
    ts::Task t2 = orch.task(0, "after"); t2.add_input(x, {8, 8}); ids[2] = orch.submit(t2);
"""),
    "shape_mismatch": orch_source("""
    ts::TensorHandle x = orch.tensor_arg(0);
    ts::Task t = orch.task(0, "rms_rows"); t.add_input(x, {8, 8}); t.add_output(x.slice({{0, 4}, {0, 4}}), {4, 8});
    orch.submit(t);
"""),
    # Uses the raw C API to submit a descriptor the C++ helpers cannot produce.
    "bad_ndim": """
#include <tilescope/abi.h>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    (void)nargs;
    ts_arg a = args[0];
    a.u.t.ndim = 9;
    return api->submit(ctx, 0, &a, 1, nullptr, 0, "raw_task") < 0 ? 1 : 0;
}
""",
    "throws": """
#include <stdexcept>
#include <tilescope/orchestration.hpp>
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::Task t = orch.task(0, "before"); t.add_inout(orch.tensor_arg(0), {8, 8}); orch.submit(t);
    throw std::runtime_error("plan file is corrupt");
}
""",
    "returns_nonzero": """
#include <tilescope/abi.h>
extern "C" int orchestration_entry(const ts_orch_api *, void *, const ts_arg *, int32_t) { return 7; }
""",
    # arg 0: x int64 [4, 4] (IN), arg 1: y int64 [4, 8] (OUT), arg 2: f32 increment, read through a
    # class type the way generated code reads ts::bf16 / ts::f16 scalars.
    "intermediate": """
#include <tilescope/orchestration.hpp>
struct Half {
    float v;
    explicit Half(double d) : v(static_cast<float>(d)) {}
    explicit Half(int64_t i) : v(static_cast<float>(i)) {}
    operator float() const { return v; }
};
extern "C" int orchestration_entry(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs) {
    ts::Orchestrator orch(api, ctx, args, nargs);
    ts::TensorHandle x = orch.tensor_arg(0), y = orch.tensor_arg(1);
    const Half inc = orch.scalar_arg<Half>(2);
    ts::TensorHandle tmp = orch.create_tensor(TS_I64, {4, 8});
    ts::Task fill = orch.task(0, "fill"); fill.add_input(x, {4, 4}); fill.add_output(tmp.slice({{0, 4}, {0, 4}}), {4, 4});
    fill.add_scalar(TS_I64, inc); orch.submit(fill);
    ts::Task copy = orch.task(0, "copy"); copy.add_input(tmp, {4, 8}); copy.add_output(y, {4, 8});
    copy.add_scalar(TS_I64, 0); orch.submit(copy);
    orch.dump_tag(tmp.slice({{0, 2}, {0, 8}}));
    return orch.status();
}
""",
}


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Every kernel and orchestration above, built once (in parallel) into a private cache."""
    return native_entries(tmp_path_factory.mktemp("runtime_core"), KERNELS, ORCHESTRATIONS)


def run(libs, orch: str, kernels: list[str], args: list, num_workers: int = 0, **recording) -> records.RunReport:
    """``run_graph`` on ``num_workers`` workers, recording ``recording`` (``Recording``'s fields)."""
    return graph.run_graph(
        libs[f"o_{orch}"].address,
        [libs[f"k_{k}"].address for k in kernels],
        kernels,
        args,
        RunConfig(num_workers=num_workers),
        Recording(**recording),
    )


def edges_of(report: records.RunReport) -> list[tuple]:
    return sorted((e.pred, e.succ, e.arg, e.kind, e.source) for e in report.edges)


def T(pred, succ, arg, kind):
    return (pred, succ, arg, kind, "tensormap")


def test_ctypes_mirror_matches_the_core(libs):
    lib = library.load_core()
    assert lib.ts_core_sizeof_arg() == 168 == ctypes.sizeof(abi.TsArg)
    assert lib.ts_core_abi_version() == 2
    # every struct size the core pins with a static_assert, against its ctypes twin ...
    sources = "".join(path.read_text() for path in sorted(library.CSRC_DIR.glob("*.cpp")))
    pinned = re.findall(r"static_assert\(sizeof\((ts_\w+)\) == (\d+)", sources)
    assert {"ts_run_summary", "ts_pmu_record", "ts_dump_buffer_name", "ts_dump_probe_name"} <= {n for n, _ in pinned}
    twins = {name: getattr(abi, "".join(part.title() for part in name.split("_"))) for name, _ in pinned}
    assert {name: ctypes.sizeof(twins[name]) for name, _ in pinned} == {name: int(n) for name, n in pinned}
    # ... and its fields, in the header's order (a swap of two same-sized fields keeps the size)
    headers = "".join(path.read_text() for path in sorted((library.CSRC_DIR.parent / "include").rglob("*.h")))
    for name, twin in twins.items():
        body = re.search(rf"typedef struct {name} \{{(.*?)\n\}} {name};", headers, re.S).group(1)
        body = re.sub(r"union\s*\{.*?\}\s*(\w+);", r"\1;", re.sub(r"/\*.*?\*/", "", body, flags=re.S), flags=re.S)
        assert re.findall(r"(\w+)\s*(?:\[[^\]]*\])*\s*;", body) == [f[0] for f in twin._fields_], name
    # the struct layouts that pack a tensor ts_arg and unpack buffer records in one go
    assert graph.TENSOR_ARG.size == ctypes.sizeof(abi.TsArg)
    assert collect.BUFFER_RECORD.size == ctypes.sizeof(abi.TsBufferRecord)


def test_raw_waw_war_on_overlapping_boxes(libs):
    x = torch.zeros(8, 8)
    report = run(
        libs, "overlap", ["noop"], [tensor_arg(x, Direction.INOUT)], record_edges=True, record_task_times=True
    )
    assert edges_of(report) == sorted(
        [
            T(0, 1, 0, "RAW"),
            T(0, 2, 0, "WAW"),
            T(1, 2, 0, "WAR"),
            T(0, 5, 0, "WAW"),
            T(1, 5, 0, "WAR"),
            T(2, 5, 0, "WAW"),
            T(3, 5, 0, "WAR"),
            T(4, 5, 0, "WAW"),
            T(5, 6, 0, "RAW"),
        ]
    )
    assert [t.name for t in report.tasks] == ["w0", "r1", "w2", "r3", "rw4", "w5", "r6"]
    assert report.num_dependencies == 9


def test_column_blocks_of_a_row_major_matrix_are_independent(libs):
    x = torch.zeros(8, 8)
    report = run(libs, "columns", ["noop"], [tensor_arg(x, Direction.INOUT)], record_edges=True)
    assert edges_of(report) == sorted(
        [
            T(0, 2, 0, "RAW"),
            T(1, 2, 0, "RAW"),
            T(0, 3, 0, "RAW"),
            T(0, 4, 0, "WAW"),
            T(1, 4, 0, "WAW"),
            T(2, 4, 0, "WAR"),
            T(3, 4, 0, "WAR"),
        ]
    )


def test_aliasing_program_args_are_detected(libs):
    base = torch.zeros(8, 8)
    args = [
        tensor_arg(base, Direction.INOUT),
        tensor_arg(base.t(), Direction.IN),
        tensor_arg(base[4:8], Direction.OUT),
    ]
    assert len({a.u.t.buffer_id for a in args}) == 1
    report = run(libs, "aliases", ["noop"], args, record_edges=True)
    # rows 0-1 of base are columns 0-1 of base.t(); rows 4-5 of base are rows 0-1 of base[4:8].
    assert edges_of(report) == [T(0, 1, 0, "RAW"), T(2, 3, 0, "WAR")]


def test_squeezed_rows_and_columns(libs):
    x = torch.zeros(8, 8)
    with pytest.raises(RuntimeFailure) as info:
        run(libs, "squeeze", ["noop"], [tensor_arg(x, Direction.INOUT)], record_edges=True)
    assert str(info.value) == (
        "task 3 'bad' (func_id 0), arg 0 (input): cannot squeeze dim 1 of tensor_arg(0)[4:5, 0:8] (shape [1, 8]): "
        "only distinct dims of extent 1 can be dropped"
    )
    report = info.value.report
    assert report.num_tasks == 3
    assert edges_of(report) == [T(0, 1, 0, "RAW")]


def test_explicit_deps_are_honoured_and_recorded(libs):
    x, y = torch.zeros(4, 4), torch.zeros(4, 4)
    report = run(
        libs,
        "explicit",
        ["noop"],
        [tensor_arg(x, Direction.INOUT), tensor_arg(y, Direction.OUT)],
        record_edges=True,
    )
    assert edges_of(report) == sorted(
        [
            (0, 1, -1, "ORDER", "explicit"),
            (0, 2, -1, "ORDER", "explicit"),
            T(0, 2, 0, "RAW"),
        ]
    )
    assert report.num_dependencies == 2


def test_no_self_edges_and_one_edge_per_argument(libs):
    x = torch.zeros(8, 8)
    report = run(libs, "self", ["noop"], [tensor_arg(x, Direction.INOUT)], record_edges=True)
    # t0's read entry is covered by its own write: no WAR 0->1. t0's write of rows 0-3 is not
    # covered by t1 (rows 2-5), so both of t2's reads still find it.
    assert edges_of(report) == [
        T(0, 1, 0, "RAW"),
        T(0, 2, 0, "RAW"),
        T(0, 2, 1, "RAW"),
        T(1, 2, 0, "RAW"),
        T(1, 2, 1, "RAW"),
    ]
    assert report.num_dependencies == 3


def make_plan(rng: random.Random, n: int, size: int = 64, max_box: int = 12) -> np.ndarray:
    """Rows: kind, src_buf, src_r, src_c, dst_buf, dst_r, dst_c, h, w, a_or_c, b.
    kind 0: dst = (dst * a + b) % PRIME (INOUT); kind 1: dst = (src + c) % PRIME, src/dst in
    different buffers. Every result depends on the order of conflicting tasks."""
    rows = []
    for _ in range(n):
        h, w = rng.randint(1, max_box), rng.randint(1, max_box)
        dst = rng.randint(0, 1)
        pos = [
            rng.randint(0, size - h),
            rng.randint(0, size - w),
            rng.randint(0, size - h),
            rng.randint(0, size - w),
        ]
        if rng.random() < 0.5:
            rows.append(
                [0, 0, 0, 0, dst, pos[0], pos[1], h, w, rng.randint(2, 97), rng.randint(0, PRIME - 1)]
            )
        else:
            rows.append([1, 1 - dst, pos[2], pos[3], dst, pos[0], pos[1], h, w, rng.randint(1, PRIME - 1), 0])
    return np.array(rows, dtype=np.int64)


def sequential_reference(plan: np.ndarray, bufs: list[np.ndarray]) -> None:
    for kind, sb, sr, sc, db, dr, dc, h, w, a, b in plan.tolist():
        dst = bufs[db][dr : dr + h, dc : dc + w]
        if kind == 0:
            dst[...] = (dst * a + b) % PRIME
        else:
            dst[...] = (bufs[sb][sr : sr + h, sc : sc + w] + a) % PRIME


def run_plan(
    libs, plan: np.ndarray, init: list[np.ndarray], **kwargs
) -> tuple[records.RunReport, list[torch.Tensor]]:
    bufs = [torch.from_numpy(b.copy()) for b in init]
    plan_t = torch.from_numpy(plan)
    args = [
        tensor_arg(bufs[0], Direction.INOUT),
        tensor_arg(bufs[1], Direction.INOUT),
        tensor_arg(plan_t, Direction.IN),
    ]
    report = run(libs, "plan", ["affine", "copy_add"], args, **kwargs)
    return report, bufs


@pytest.mark.parametrize("num_workers", [4, 0])
def test_10k_task_graph_matches_sequential_reference(libs, num_workers):
    rng = random.Random(1234 + num_workers)
    plan = make_plan(rng, 10_000)
    init = [
        np.arange(64 * 64, dtype=np.int64).reshape(64, 64) % 1009,
        np.arange(64 * 64, dtype=np.int64).reshape(64, 64)[::-1].copy() % 1013,
    ]
    expected = [b.copy() for b in init]
    sequential_reference(plan, expected)

    report, got = run_plan(
        libs, plan, init, num_workers=num_workers, record_edges=True, record_task_times=True
    )
    assert report.num_tasks == 10_000
    if num_workers:
        assert report.num_workers == num_workers
    for name, g, e in zip("XY", got, expected):
        assert np.array_equal(g.numpy(), e), f"{name} differs from the sequential reference"

    tasks = report.tasks
    assert [t.task_id for t in tasks] == list(range(10_000))
    assert all(t.worker >= 0 and t.submit_ns <= t.start_ns <= t.end_ns for t in tasks)
    assert len(report.edges) > 10_000
    late = [(e.pred, e.succ) for e in report.edges if tasks[e.pred].end_ns > tasks[e.succ].start_ns]
    assert late == []
    assert {t.worker for t in tasks} <= set(range(report.num_workers))


def conflicts(plan: np.ndarray) -> set[tuple[int, int]]:
    """Every (i, j), i < j, whose accesses overlap with at least one write (brute force)."""
    accesses = []
    for kind, sb, sr, sc, db, dr, dc, h, w, _, _ in plan.tolist():
        acc = [(db, dr, dc, h, w, True)]
        if kind == 1:
            acc.append((sb, sr, sc, h, w, False))
        accesses.append(acc)
    out = set()
    for j, aj in enumerate(accesses):
        for i in range(j):
            for bi, ri, ci, hi, wi, wri in accesses[i]:
                for bj, rj, cj, hj, wj, wrj in aj:
                    if (
                        bi == bj
                        and (wri or wrj)
                        and ri < rj + hj
                        and rj < ri + hi
                        and ci < cj + wj
                        and cj < ci + wi
                    ):
                        out.add((i, j))
    return out


def test_edges_order_every_conflicting_pair_and_nothing_else(libs):
    """The recorded graph's transitive closure contains every conflicting pair (pruned entries
    included), and every recorded edge is itself a conflict."""
    rng = random.Random(7)
    for _ in range(10):
        plan = make_plan(rng, 150, size=16, max_box=6)
        init = [np.zeros((64, 64), np.int64), np.zeros((64, 64), np.int64)]
        report, _ = run_plan(libs, plan, init, num_workers=2, record_edges=True)
        needed = conflicts(plan)
        recorded = {(e.pred, e.succ) for e in report.edges}
        assert recorded <= needed
        reach = [0] * len(plan)  # bitset of predecessors reachable from each task
        preds: dict[int, list[int]] = {}
        for p, s in recorded:
            preds.setdefault(s, []).append(p)
        for s in range(len(plan)):
            for p in preds.get(s, []):
                reach[s] |= reach[p] | (1 << p)
        missing = [(i, j) for i, j in needed if not (reach[j] >> i) & 1]
        assert missing == []


def make_walk_plan(rng: random.Random, n: int, size: int = 64) -> np.ndarray:
    """Rows as make_plan's, walking forward through the buffers row after row (each box starts
    past the boxes before it, the region index's append path) and now and then jumping back."""
    rows = []
    row = 0
    for _ in range(n):
        h, w = rng.randint(1, 3), rng.randint(1, 12)
        if rng.random() < 0.15 or row + h > size:
            row = rng.randint(0, size - h)
        col, dst = rng.randint(0, size - w), rng.randint(0, 1)
        if rng.random() < 0.5:
            rows.append([0, 0, 0, 0, dst, row, col, h, w, rng.randint(2, 97), rng.randint(0, PRIME - 1)])
        else:
            rows.append([1, 1 - dst, row, col, dst, row, col, h, w, rng.randint(1, PRIME - 1), 0])
        row += h
    return np.array(rows, dtype=np.int64)


def test_a_graph_walking_its_buffers_forward_gets_every_conflict_edge(libs):
    rng = random.Random(11)
    for _ in range(5):
        plan = make_walk_plan(rng, 200)
        init = [np.arange(64 * 64, dtype=np.int64).reshape(64, 64) % 1009, np.ones((64, 64), np.int64)]
        expected = [b.copy() for b in init]
        sequential_reference(plan, expected)
        report, got = run_plan(libs, plan, init, num_workers=2, record_edges=True)
        assert all(np.array_equal(g.numpy(), e) for g, e in zip(got, expected))
        needed = conflicts(plan)
        recorded = {(e.pred, e.succ) for e in report.edges}
        assert recorded <= needed
        reach = [0] * len(plan)
        for p, s in sorted(recorded, key=lambda e: e[1]):
            reach[s] |= reach[p] | (1 << p)
        assert [(i, j) for i, j in needed if not (reach[j] >> i) & 1] == []


def test_gil_is_released_during_a_run(libs):
    ticks: list[float] = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        start = time.perf_counter()
        report = run(
            libs,
            "spin_chain",
            ["spin"],
            [scalar_arg(150, dtypes.i64), scalar_arg(2000.0, dtypes.f64)],
            num_workers=1,
        )
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    assert report.num_tasks == 150 and end - start >= 0.3
    during = [t for t in ticks if start + 0.05 < t < end - 0.05]
    assert len(during) >= 50, f"only {len(during)} ticks while the graph ran for {end - start:.2f}s"


def test_bad_func_id_is_a_clear_error_and_the_run_returns(libs):
    x = torch.zeros(8, 8)
    with pytest.raises(RuntimeFailure) as info:
        run(libs, "bad_func_id", ["noop"], [tensor_arg(x, Direction.INOUT)], record_task_times=True)
    assert str(info.value) == (
        "task 1 'bogus' (func_id 3): func_id 3 is out of range: this run has 1 kernel(s) (0 'noop')"
    )
    report = info.value.report
    assert report.status != 0 and report.num_tasks == 1
    assert [t.name for t in report.tasks] == ["fine"]


def test_levels_out_of_range_are_argument_errors(libs):
    x = torch.zeros(8, 8)
    args = [tensor_arg(x, Direction.INOUT)]
    with pytest.raises(ArgumentError, match=r"dump_level must be 0\.\.3, got 4"):
        run(libs, "overlap", ["noop"], args, dump_level=4)
    with pytest.raises(ArgumentError, match=r"print_intermediates must be 0\.\.3, got 4"):
        run(libs, "overlap", ["noop"], args, print_intermediates=4)


def test_out_of_bounds_slice_is_reported_with_task_and_arg(libs):
    x = torch.zeros(8, 8)
    ids = torch.full((3,), 99, dtype=torch.int64)
    with pytest.raises(RuntimeFailure) as info:
        run(libs, "oob_slice", ["noop"], [tensor_arg(x, Direction.INOUT), tensor_arg(ids, Direction.OUT)])
    assert str(info.value) == (
        "task 1 'oob' (func_id 0), arg 0 (input): slice [0:4, 6:10] of tensor_arg(0)[0:8, 0:8] (shape [8, 8]) "
        "is out of bounds: dim 1 range [6, 10) is not within [0, 8)"
    )
    assert ids.tolist() == [0, -1, -1]
    assert info.value.report.num_tasks == 1
    failure = info.value.report.failure  # what the runtime recorded, for tools to read
    assert (failure.kind, failure.cause, failure.func_id, failure.arg_index, failure.task_id) == (
        "error", "region", 0, 0, -1)


def test_region_shape_mismatch_names_expected_and_actual_shape(libs):
    x = torch.zeros(8, 8)
    with pytest.raises(RuntimeFailure) as info:
        run(libs, "shape_mismatch", ["noop"], [tensor_arg(x, Direction.INOUT)])
    assert str(info.value) == (
        "task 0 'rms_rows' (func_id 0), arg 1 (output): region tensor_arg(0)[0:4, 0:4] has shape [4, 4], "
        "but the kernel parameter expects [4, 8]"
    )
    assert info.value.report.num_tasks == 0


def test_invalid_ndim_is_rejected_at_submit(libs):
    x = torch.zeros(8, 8)
    with pytest.raises(RuntimeFailure) as info:
        run(libs, "bad_ndim", ["noop"], [tensor_arg(x, Direction.INOUT)])
    assert (
        str(info.value)
        == "task 0 'raw_task' (func_id 0, kernel 'noop'), arg 0: ndim 9 is out of range [1, 8]"
    )


def test_orchestration_exceptions_and_status_are_reported(libs):
    x = torch.zeros(8, 8)
    with pytest.raises(RuntimeFailure) as info:
        run(libs, "throws", ["noop"], [tensor_arg(x, Direction.INOUT)])
    assert str(info.value) == "the orchestration threw a C++ exception: plan file is corrupt"
    assert info.value.report.num_tasks == 1
    with pytest.raises(RuntimeFailure, match="^the orchestration returned 7 without reporting an error$"):
        run(libs, "returns_nonzero", ["noop"], [])


def test_intermediate_tensors_are_zero_filled_and_ordered(libs):
    x = torch.arange(16, dtype=torch.int64).reshape(4, 4)
    y = torch.full((4, 8), -5, dtype=torch.int64)
    args = [tensor_arg(x, Direction.IN), tensor_arg(y, Direction.OUT), scalar_arg(3.0, dtypes.f32)]
    report = run(libs, "intermediate", ["copy_add"], args, record_edges=True)
    expected = torch.zeros(4, 8, dtype=torch.int64)
    expected[:, :4] = x + 3
    assert torch.equal(y, expected)
    assert report.edges == [EdgeRecord(0, 1, 0, "RAW", "tensormap")]
    (tag,) = report.dump_tags
    assert (tag.first_task, tag.dtype, tag.shape, tag.strides, tag.offset) == (2, "i64", (2, 8), (8, 1), 0)


def test_arguments_are_validated_in_python(libs):
    with pytest.raises(ArgumentError, match="run_graph: 1 kernel addresses but 2 names"):
        graph.run_graph(libs["o_overlap"].address, [libs["k_noop"].address], ["a", "b"], [])
    with pytest.raises(ArgumentError, match="at most 8"):
        tensor_arg(torch.zeros((1,) * 9), Direction.IN)
    with pytest.raises(ArgumentError, match="not an integer"):
        scalar_arg(1.5, dtypes.i32)
    with pytest.raises(ArgumentError, match="unknown argument direction 'sideways'"):
        tensor_arg(torch.zeros(2), "sideways")
    assert tensor_arg(torch.zeros(2), "inout").dir == abi.DIRECTION_CODES[Direction.INOUT]
    arg = tensor_arg(torch.zeros(6, 8)[2:5, 1:3], Direction.IN)
    t = arg.u.t
    assert (t.ndim, list(t.shape[:2]), list(t.strides[:2]), t.offset, t.dtype) == (2, [3, 2], [8, 1], 17, 0)


# --- Reused runtimes: workers outlive a run, nothing else does. ---

OVERLAP_EDGES = sorted(
    [
        T(0, 1, 0, "RAW"),
        T(0, 2, 0, "WAW"),
        T(1, 2, 0, "WAR"),
        T(0, 5, 0, "WAW"),
        T(1, 5, 0, "WAR"),
        T(2, 5, 0, "WAW"),
        T(3, 5, 0, "WAR"),
        T(4, 5, 0, "WAW"),
        T(5, 6, 0, "RAW"),
    ]
)
COLUMNS_EDGES = sorted(
    [
        T(0, 2, 0, "RAW"),
        T(1, 2, 0, "RAW"),
        T(0, 3, 0, "RAW"),
        T(0, 4, 0, "WAW"),
        T(1, 4, 0, "WAW"),
        T(2, 4, 0, "WAR"),
        T(3, 4, 0, "WAR"),
    ]
)


def run_on(
    runtime: graph.Runtime, libs, orch: str, kernels: list[str], args: list, **kwargs
) -> records.RunReport:
    return runtime.run(
        libs[f"o_{orch}"].address, [libs[f"k_{k}"].address for k in kernels], kernels, args, recording=Recording(**kwargs)
    )


def check_clean_overlap(report: records.RunReport, num_workers: int) -> None:
    """The report of the "overlap" program holds that run's records and nothing else."""
    assert (report.status, report.error, report.num_tasks, report.num_dependencies) == (0, "", 7, 9)
    assert edges_of(report) == OVERLAP_EDGES
    assert [t.name for t in report.tasks] == ["w0", "r1", "w2", "r3", "rw4", "w5", "r6"]
    assert [t.task_id for t in report.tasks] == list(range(7))
    assert all(0 <= t.worker < num_workers for t in report.tasks)
    assert report.dump_tags == []
    assert report.num_workers == num_workers


def test_a_failed_run_leaves_nothing_behind_on_its_runtime(libs):
    with graph.Runtime(2) as runtime:
        x = torch.zeros(8, 8)
        y = torch.full((4, 8), -5, dtype=torch.int64)
        inter_args = [
            tensor_arg(torch.arange(16, dtype=torch.int64).reshape(4, 4), Direction.IN),
            tensor_arg(y, Direction.OUT),
            scalar_arg(3.0, dtypes.f32),
        ]
        first = run_on(runtime, libs, "intermediate", ["copy_add"], inter_args, record_edges=True)
        assert len(first.dump_tags) == 1
        with pytest.raises(RuntimeFailure, match="func_id 3 is out of range"):
            run_on(
                runtime,
                libs,
                "bad_func_id",
                ["noop"],
                [tensor_arg(x, Direction.INOUT)],
                record_edges=True,
                record_task_times=True,
            )
        with pytest.raises(RuntimeFailure, match="plan file is corrupt"):
            run_on(
                runtime, libs, "throws", ["noop"], [tensor_arg(x, Direction.INOUT)], record_task_times=True
            )

        # Same buffer as the failed runs: a leaked tensor map would add edges from their tasks.
        report = run_on(
            runtime,
            libs,
            "overlap",
            ["noop"],
            [tensor_arg(x, Direction.INOUT)],
            record_edges=True,
            record_task_times=True,
        )
        check_clean_overlap(report, 2)

        # Intermediates are fresh and zero-filled again; ids, edges and dump tags start over.
        y.fill_(-5)
        again = run_on(runtime, libs, "intermediate", ["copy_add"], inter_args, record_edges=True)
        assert torch.equal(y[:, 4:], torch.zeros(4, 4, dtype=torch.int64))
        assert again.edges == [EdgeRecord(0, 1, 0, "RAW", "tensormap")]
        assert [(t.first_task, t.shape) for t in again.dump_tags] == [(2, (2, 8))]
        assert again.num_tasks == 2 and again.error == ""


def test_two_programs_alternately_on_one_runtime(libs):
    rng = random.Random(99)
    plan = make_plan(rng, 300)
    init = [np.arange(64 * 64, dtype=np.int64).reshape(64, 64) % 97, np.zeros((64, 64), np.int64)]
    expected = [b.copy() for b in init]
    sequential_reference(plan, expected)
    x = torch.zeros(8, 8)
    with graph.Runtime(3) as runtime:
        for i in range(60):
            report = run_on(
                runtime,
                libs,
                "overlap",
                ["noop"],
                [tensor_arg(x, Direction.INOUT)],
                record_edges=True,
                record_task_times=True,
            )
            check_clean_overlap(report, 3)
            report = run_on(
                runtime,
                libs,
                "columns",
                ["noop"],
                [tensor_arg(x, Direction.INOUT)],
                record_edges=True,
                record_task_times=i % 2 == 0,
            )
            assert edges_of(report) == COLUMNS_EDGES and report.num_tasks == 5
            assert [t.name for t in report.tasks] == (
                ["left", "right", "middle", "left_again", "top"] if i % 2 == 0 else []
            )
            if i % 10 == 0:
                ids = torch.zeros(3, dtype=torch.int64)
                with pytest.raises(RuntimeFailure, match="is out of bounds"):
                    run_on(
                        runtime,
                        libs,
                        "oob_slice",
                        ["noop"],
                        [tensor_arg(x, Direction.INOUT), tensor_arg(ids, Direction.OUT)],
                    )
                bufs = [torch.from_numpy(b.copy()) for b in init]
                args = [tensor_arg(bufs[0], Direction.INOUT), tensor_arg(bufs[1], Direction.INOUT)]
                args.append(tensor_arg(torch.from_numpy(plan), Direction.IN))
                report = run_on(runtime, libs, "plan", ["affine", "copy_add"], args, record_task_times=True)
                assert all(np.array_equal(g.numpy(), e) for g, e in zip(bufs, expected))
                assert {t.worker for t in report.tasks} <= {0, 1, 2}


def test_run_graph_reuses_pooled_runtimes(libs, monkeypatch):
    pool = graph.RuntimePool(max_idle=2)
    monkeypatch.setattr(graph, "_runtimes", pool)
    created: list[graph.Runtime] = []

    class CountingRuntime(graph.Runtime):
        def __init__(self, num_workers: int = 0) -> None:
            super().__init__(num_workers)
            created.append(self)

    monkeypatch.setattr(graph, "Runtime", CountingRuntime)
    x = torch.zeros(8, 8)
    for _ in range(3):
        check_clean_overlap(
            run(
                libs,
                "overlap",
                ["noop"],
                [tensor_arg(x, Direction.INOUT)],
                num_workers=3,
                record_edges=True,
                record_task_times=True,
            ),
            3,
        )
    assert len(created) == 1 and pool.idle_workers() == [3]
    with pytest.raises(RuntimeFailure):
        run(libs, "returns_nonzero", ["noop"], [], num_workers=3)
    assert len(created) == 1 and pool.idle_workers() == [3]  # a failed run gives its runtime back

    run(libs, "overlap", ["noop"], [tensor_arg(x, Direction.INOUT)], num_workers=1)
    run(libs, "overlap", ["noop"], [tensor_arg(x, Direction.INOUT)], num_workers=0)
    assert [r.requested_workers for r in created] == [3, 1, 0]
    assert pool.idle_workers() == [1, 0]  # the least recently used one was closed
    assert created[0].closed and not created[1].closed
    pool.close()
    assert all(r.closed for r in created) and pool.idle_workers() == []
    run(libs, "overlap", ["noop"], [tensor_arg(x, Direction.INOUT)], num_workers=1)
    assert created[-1].closed  # a closed pool closes what it is given back


def test_concurrent_runs_get_separate_runtimes_or_wait(libs):
    """Threads calling run_graph (pooled runtimes) and threads sharing one Runtime all get
    correct results."""
    rng = random.Random(5)
    plan = make_plan(rng, 400)
    init = [np.arange(64 * 64, dtype=np.int64).reshape(64, 64) % 89, np.ones((64, 64), np.int64)]
    expected = [b.copy() for b in init]
    sequential_reference(plan, expected)
    errors: list[str] = []

    def worker(shared: graph.Runtime | None) -> None:
        for _ in range(8):
            bufs = [torch.from_numpy(b.copy()) for b in init]
            args = [tensor_arg(bufs[0], Direction.INOUT), tensor_arg(bufs[1], Direction.INOUT)]
            args.append(tensor_arg(torch.from_numpy(plan), Direction.IN))
            try:
                if shared is None:
                    report = run(
                        libs, "plan", ["affine", "copy_add"], args, num_workers=2, record_task_times=True
                    )
                else:
                    report = run_on(
                        shared, libs, "plan", ["affine", "copy_add"], args, record_task_times=True
                    )
            except RuntimeFailure as e:  # pragma: no cover - reported below
                errors.append(str(e))
                continue
            if not all(np.array_equal(g.numpy(), e) for g, e in zip(bufs, expected)):
                errors.append("results differ from the sequential reference")
            if report.num_tasks != 400 or not {t.worker for t in report.tasks} <= {0, 1}:
                errors.append(f"bad report: {report.num_tasks} tasks")

    with graph.Runtime(2) as shared:
        threads = [threading.Thread(target=worker, args=(shared if i % 2 else None,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert len(graph.runtime_pool().idle_workers()) <= graph.MAX_IDLE_RUNTIMES
    with pytest.raises(RuntimeFailure, match="this runtime is closed"):
        run_on(shared, libs, "returns_nonzero", ["noop"], [])


def test_the_c_api_without_a_pool(libs):
    """ts_run (a runtime of its own per call) still works; ts_runtime_run checks the worker count."""
    lib = library.load_core()
    x = torch.zeros(8, 8)
    kernels = (ctypes.c_void_p * 1)(libs["k_noop"].address)
    names = (ctypes.c_char_p * 1)(b"noop")
    args = (abi.TsArg * 1)(tensor_arg(x, Direction.INOUT))
    config = abi.TsRunConfig(2, 1, 1)
    handle = lib.ts_run(ctypes.byref(config), libs["o_overlap"].address, kernels, names, 1, args, 1)
    check_clean_overlap(collect.collect(collect.RunResult(lib, handle), True), 2)  # freed with its RunResult

    runtime = lib.ts_runtime_create(3)
    try:
        assert lib.ts_runtime_num_workers(runtime) == 3
        handle = lib.ts_runtime_run(
            runtime, ctypes.byref(config), libs["o_overlap"].address, kernels, names, 1, args, 1
        )
        try:
            assert lib.ts_run_status(handle) == 1
            assert (
                lib.ts_run_error(handle)
                == b"ts_runtime_run: the config asks for 2 worker(s) but the runtime has 3"
            )
        finally:
            lib.ts_run_free(handle)
    finally:
        lib.ts_runtime_destroy(runtime)


EXIT_SCRIPT = """
import os, sys, threading, time
from tilescope.ir import dtypes
from tilescope.runtime import graph, library
from tilescope.runtime.run_config import RunConfig

mode, orch_path, kernel_path = sys.argv[1:4]
orch = library.load_entry(orch_path, "orchestration_entry")
spin = library.load_entry(kernel_path, "kernel_entry")


def chain(n, us, **kw):
    args = [graph.scalar_arg(n, dtypes.i64), graph.scalar_arg(us, dtypes.f64)]
    return graph.run_graph(orch.address, [spin.address], ["spin"], args, RunConfig(**kw))


for workers in (2, 0, 2):
    assert chain(20, 50, num_workers=workers).num_tasks == 20
kept = graph.Runtime(3)  # never closed: parked workers at exit
kept.run(orch.address, [spin.address], ["spin"], [graph.scalar_arg(5, dtypes.i64), graph.scalar_arg(10.0, dtypes.f64)])
if mode == "daemon":  # a run still in progress when the interpreter exits
    threading.Thread(target=chain, args=(1000, 1e6), kwargs={"num_workers": 2}, daemon=True).start()
    time.sleep(0.2)
elif mode == "fork":
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = chain(30, 20, num_workers=2).num_tasks == 30
            try:
                kept.run(orch.address, [spin.address], ["spin"], [])
                ok = False
            except RuntimeFailure as e:
                ok = ok and "another process" in str(e)
        finally:
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert chain(10, 10, num_workers=2).num_tasks == 10
print("done", flush=True)
"""


@pytest.mark.parametrize("mode", ["plain", "daemon", "fork"])
def test_process_exits_cleanly_with_parked_workers(libs, tmp_path, mode):
    script = tmp_path / "exit_script.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT))
    env = dict(os.environ, TILESCOPE_CACHE_DIR=str(library.library_path().parents[2]))
    # NOTE: the timeout is the assertion that exit does not wait for the daemon's 1000 s graph.
    proc = subprocess.run(
        [sys.executable, str(script), mode, libs["o_spin_chain"].library._name, libs["k_spin"].library._name],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if mode == "daemon":  # a run in flight at exit: reported, and never a passing status
        assert (proc.returncode, proc.stdout) == (1, "done\n"), proc.stderr
        assert "[tilescope] exit() was called while a run was in flight: the run did not finish" in proc.stderr
    else:
        assert (proc.returncode, proc.stdout) == (0, "done\n"), proc.stderr
