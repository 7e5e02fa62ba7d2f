"""Passes: before/after IR compared structurally (both written as DSL source)."""

import textwrap

from tilescope.ir.printer import program_str
from tilescope.language.frontend import load_source
from tilescope.passes.pipeline import eliminate_dead_code, fold_constants, fuse_matmul_accumulate

HEAD = "import tilescope as ts\n\n"


def program(body: str, orch: str = "    k(x, y)\n", params: str = ""):
    src = (
        HEAD
        + textwrap.dedent(
            f"""
        @ts.kernel
        def k(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.f32]{params}):
        """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
        + textwrap.dedent(
            """

        @ts.jit
        def p(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.f32]):
        """
        )
        + orch
    )
    return load_source(src, f"<pass test {abs(hash(src))}>")


def test_fold_constants_simplifies_index_identities():
    before = program(
        """
        for i in ts.range(0, 16, 8):
            j = i + 0
            ts.store(y, [0, j * 1], ts.load(x, [0, 0 + i], [16, 8]))
        """
    )
    after = program(
        """
        for i in ts.range(0, 16, 8):
            j = i
            ts.store(y, [0, j], ts.load(x, [0, i], [16, 8]))
        """
    )
    assert fold_constants(before) == after


def test_fuse_matmul_accumulate():
    before = program(
        """
        acc = ts.zeros([16, 16], ts.f32)
        for kk in ts.range(0, 16, 8):
            acc = acc + ts.matmul(ts.load(x, [0, kk], [16, 8]), ts.load(x, [kk, 0], [8, 16]))
        ts.store(y, [0, 0], acc)
        """
    )
    after = program(
        """
        acc = ts.zeros([16, 16], ts.f32)
        for kk in ts.range(0, 16, 8):
            acc = ts.matmul(ts.load(x, [0, kk], [16, 8]), ts.load(x, [kk, 0], [8, 16]), acc=acc)
        ts.store(y, [0, 0], acc)
        """
    )
    fused = fuse_matmul_accumulate(before)
    assert fused == after
    assert "acc=acc" in program_str(fused)
    # a matmul added to something else is left alone
    other = program(
        """
        acc = ts.zeros([16, 16], ts.f32)
        b = ts.zeros([16, 16], ts.f32)
        acc = b + ts.matmul(ts.load(x, [0, 0], [16, 16]), ts.load(x, [0, 0], [16, 16]))
        ts.store(y, [0, 0], acc)
        """
    )
    assert fuse_matmul_accumulate(other) == other


def test_dead_code_elimination_keeps_loop_carried_values():
    before = program(
        """
        unused = ts.exp(ts.load(x, [0, 0], [16, 16]))
        acc = ts.zeros([16, 1], ts.f32)
        dead_in_loop = ts.zeros([16, 1], ts.f32)
        for c in ts.range(0, 16, 8):
            t = ts.load(x, [0, c], [16, 8])
            dead_in_loop = ts.row_max(t)
            acc = acc + ts.row_sum(t)
        ts.store(y, [0, 0], ts.load(x, [0, 0], [16, 16]) * acc)
        """
    )
    after = program(
        """
        acc = ts.zeros([16, 1], ts.f32)
        for c in ts.range(0, 16, 8):
            t = ts.load(x, [0, c], [16, 8])
            acc = acc + ts.row_sum(t)
        ts.store(y, [0, 0], ts.load(x, [0, 0], [16, 16]) * acc)
        """
    )
    assert eliminate_dead_code(before) == after


def test_fuse_matmul_accumulate_leaves_a_product_that_reads_the_accumulator():
    before = program(
        """
        acc = ts.load(x, [0, 0], [16, 16])
        acc = acc + ts.matmul(acc, ts.load(x, [0, 0], [16, 16]))
        acc = ts.matmul(ts.load(x, [0, 0], [16, 16]), acc) + acc
        ts.store(y, [0, 0], acc)
        """
    )
    assert fuse_matmul_accumulate(before) == before
