"""The one IR traversal (``ir.traverse``): every node class, every field holding nodes, is
walked and rewritten — checked by building every node class of ``ir.nodes`` generically from
its annotations, so a node or a field added later is covered or fails here."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import textwrap
import typing

import pytest

from tilescope.errors import SourceLoc
from tilescope.ir import nodes
from tilescope.ir import types as ir_types
from tilescope.ir.analysis import uses
from tilescope.ir.dtypes import DType
from tilescope.ir.nodes import BinOp, Const, DumpTag, Evaluate, For, If, Submit, Var
from tilescope.ir.traverse import (
    CONTAINER_TYPES,
    EXPR_TYPES,
    NODE_TYPES,
    STMT_TYPES,
    child_exprs,
    child_stmts,
    children,
    is_expr,
    map_exprs,
    map_stmts,
    stmt_bodies,
    walk,
    walk_exprs,
    walk_stmts,
)
from tilescope.ir.types import INDEX
from tilescope.ir.verifier import verify_program
from tilescope.language.frontend import load_source
from tilescope.passes.pipeline import fold_constants

ALL_CLASSES = [
    c
    for _, c in inspect.getmembers(nodes, inspect.isclass)
    if dataclasses.is_dataclass(c) and c.__module__ == nodes.__name__
]
CONTAINERS = {nodes.SliceRange, nodes.Param, nodes.Kernel, nodes.Program}

# Leaf classes an annotation may name without holding IR nodes.
PLAIN = (str, int, float, bool, type(None), SourceLoc, DType, enum.Enum)
PLAIN_TYPES = tuple(
    c for _, c in inspect.getmembers(ir_types, inspect.isclass) if c.__module__ == ir_types.__name__
)


def _leaves(hint) -> list:
    args = typing.get_args(hint)
    if not args:
        return [hint]
    return [leaf for a in args for leaf in _leaves(a)]


class Builder:
    """Builds any node class with a marker (a distinct ``Var``, or an ``Evaluate`` of one) in
    every field that may hold nodes and a distinct sentinel in every other field."""

    def __init__(self):
        self.exprs: list[str] = []  # names of the marker variables
        self.stmts: list[str] = []  # names of the variables the marker statements evaluate
        self.plain: list[tuple[object, str, object]] = []  # (node, field, sentinel)

    def var(self) -> Var:
        v = Var(f"m{len(self.exprs)}", INDEX)
        self.exprs.append(v.name)
        return v

    def value(self, hint):
        if typing.get_origin(hint) is tuple:
            item, *rest = typing.get_args(hint)
            assert rest == [Ellipsis], f"teach the builder {hint}"
            if not self.holds_nodes(item):
                return None
            return (self.value(item), self.value(item))
        if not self.holds_nodes(hint):
            return None
        classes = [c for c in _leaves(hint) if c in NODE_TYPES]
        if Var in classes:
            return self.var()
        if Evaluate in classes:
            s = Evaluate(self.var())
            self.stmts.append(s.value.name)
            return s
        return self.build(classes[0])

    def holds_nodes(self, hint) -> bool:
        leaves = _leaves(hint)
        if any(c in NODE_TYPES for c in leaves):
            return True
        unknown = [c for c in leaves if c is not Ellipsis and not self.plain_leaf(c)]
        assert not unknown, f"an annotation the builder does not know: {hint} (teach tests/ir/test_traverse.py)"
        return False

    @staticmethod
    def plain_leaf(c) -> bool:
        return c in PLAIN_TYPES or (isinstance(c, type) and issubclass(c, PLAIN))

    def build(self, cls):
        hints = typing.get_type_hints(cls)
        kwargs, sentinels = {}, {}
        for f in dataclasses.fields(cls):
            v = self.value(hints[f.name])
            if v is None:
                v = sentinels[f.name] = object()
            kwargs[f.name] = v
        node = cls(**kwargs)
        self.plain += [(node, name, s) for name, s in sentinels.items()]
        return node


def _marker_names(root) -> set[str]:
    return {e.name for e in walk_exprs(root) if isinstance(e, Var) and isinstance(e.name, str)}


def test_every_node_class_is_an_expression_a_statement_or_a_known_container():
    assert set(NODE_TYPES) == set(ALL_CLASSES)
    assert set(EXPR_TYPES) | set(STMT_TYPES) | CONTAINERS == set(ALL_CLASSES), (
        "a new node class must join the Expr or Stmt union (or CONTAINERS here)"
    )
    assert set(CONTAINER_TYPES) == CONTAINERS
    assert not set(EXPR_TYPES) & set(STMT_TYPES)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_child_field_is_walked(cls):
    b = Builder()
    node = b.build(cls)
    assert list(walk(node))[0] is node
    assert _marker_names(node) == set(b.exprs)
    evaluated = {s.value.name for s in walk_stmts(node) if isinstance(s, Evaluate)}
    assert evaluated >= set(b.stmts)
    # direct children: what child_exprs/child_stmts give covers every marker one level down
    direct = {e.name for e in child_exprs(node) if isinstance(e, Var)}
    direct |= {s.value.name for s in child_stmts(node) if isinstance(s, Evaluate)}
    one_level = {x.name for x in children(node) if isinstance(x, Var)}
    assert one_level <= direct
    if cls in STMT_TYPES:
        assert next(walk_stmts(node)) is node
    if cls in EXPR_TYPES:
        assert next(walk_exprs(node)) is node


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_child_field_is_mapped(cls):
    b = Builder()
    node = b.build(cls)
    assert map_exprs(node, lambda e: e) is node
    assert map_stmts(node, lambda s: s) is node

    def rename(e):
        return dataclasses.replace(e, name=e.name + "_r") if isinstance(e, Var) and e.name in b.exprs else e

    out = map_exprs(node, rename)
    assert _marker_names(out) == {n + "_r" for n in b.exprs}
    assert type(out) is cls
    for f in dataclasses.fields(cls):  # plain fields are kept as they are
        if any(n is node and name == f.name for n, name, _ in b.plain):
            assert getattr(out, f.name) is getattr(node, f.name)

    def restmt(s):
        if isinstance(s, Evaluate) and isinstance(s.value, Var) and s.value.name in b.stmts:
            return Evaluate(Var(s.value.name + "_s", INDEX))
        return s

    out = map_stmts(node, restmt)
    evaluated = {s.value.name for s in walk_stmts(out) if isinstance(s, Evaluate)}
    assert evaluated >= {n + "_s" for n in b.stmts}
    assert not evaluated & set(b.stmts)


def test_stmt_bodies_include_empty_branches():
    s = If(Var("c", INDEX), (Evaluate(Var("a", INDEX)),), ())
    assert stmt_bodies(s) == (s.then, ())
    loop = For("i", Const(0, INDEX), Const(4, INDEX), Const(1, INDEX), ())
    assert stmt_bodies(loop) == ((),)
    assert stmt_bodies(Evaluate(Var("a", INDEX))) == ()


def test_walks_are_pre_order_in_evaluation_order():
    a, b, c = Var("a", INDEX), Var("b", INDEX), Var("c", INDEX)
    inner = Evaluate(BinOp("add", b, c, INDEX))
    loop = For("i", a, b, Const(1, INDEX), (inner,))
    assert list(walk_stmts((loop,))) == [loop, inner]
    names = [e.name for e in walk_exprs(loop) if isinstance(e, Var)]
    assert names == ["a", "b", "b", "c"]


def test_deep_expressions_do_not_exhaust_the_stack():
    e = Var("x", INDEX)
    for _ in range(5000):
        e = BinOp("add", e, Const(1, INDEX), INDEX)
    assert sum(1 for _ in walk_exprs(e)) == 10001


# -- regressions of the hand-written walkers it replaced ---------------------------------------

HEAD = "import tilescope as ts\n\n"


def _program(step: int = 2):
    src = HEAD + textwrap.dedent(
        f"""
        @ts.kernel
        def k(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
            for i in ts.range(0, 8, {step}):
                ts.store(y, [i, 0], ts.load(x, [i, 0], [{step}, 16]))

        @ts.jit
        def p(x: ts.Tensor[[8, 16], ts.f32], y: ts.Out[[8, 16], ts.f32]):
            t = k(x, y)
            for r in ts.range(0, 8, {step}):
                t = ts.submit(k, x, y, deps=[t], dumps=[y])
                ts.dump_tag(y)
        """
    )
    return load_source(src, f"<traverse test {step}>")


def _one_plus_one_steps(p):
    """``p`` with every loop step written as ``1 + 1`` (the front-end folds it itself)."""
    two = BinOp("add", Const(1, INDEX), Const(1, INDEX), INDEX)

    def f(s):
        return dataclasses.replace(s, step=two) if isinstance(s, For) else s

    return map_stmts(p, f)


def test_fold_constants_folds_loop_steps_in_kernels_and_orchestrations():
    p = _program()
    unfolded = _one_plus_one_steps(p)
    steps = [s.step for s in walk_stmts(unfolded) if isinstance(s, For)]
    assert len(steps) == 2 and all(isinstance(x, BinOp) for x in steps)  # kernel and orchestration
    folded = fold_constants(unfolded)
    assert folded == p
    assert [s.step for s in walk_stmts(folded) if isinstance(s, For)] == [Const(2, INDEX)] * 2
    verify_program(folded)


def test_submit_deps_dumps_and_dump_tags_are_reached():
    p = _program()
    submits = [e for e in walk_exprs(p.body) if isinstance(e, Submit)]
    tags = [e for e in walk_exprs(p.body) if isinstance(e, DumpTag)]
    assert len(submits) == 2 and len(tags) == 1
    loop_submit = submits[1]
    assert [d.name for d in loop_submit.deps] == ["t"] and [d.name for d in loop_submit.dumps] == ["y"]
    assert {"t", "y"} <= uses(loop_submit)
    assert uses(tags[0]) == {"y"}
    assert is_expr(tags[0])  # the front-end's list of expression classes once missed DumpTag

    def rename(e):
        return (
            dataclasses.replace(e, name=e.name.upper()) if isinstance(e, Var) and e.name in ("t", "y") else e
        )

    out = map_exprs(p.body, rename)
    loop_submit = [e for e in walk_exprs(out) if isinstance(e, Submit)][1]
    assert [d.name for d in loop_submit.deps] == ["T"] and [d.name for d in loop_submit.dumps] == ["Y"]
    assert [e.tensor.name for e in walk_exprs(out) if isinstance(e, DumpTag)] == ["Y"]


def test_maps_share_what_they_do_not_change():
    p = _program()
    assert fold_constants(p) is p
    unfolded = _one_plus_one_steps(p)
    folded = fold_constants(unfolded)
    # the kernel's store did not change: the same object, not a copy
    assert folded.kernels[0].body[0].body[0] is p.kernels[0].body[0].body[0]


def test_body_tuples_map_to_tuples():
    body = (Evaluate(Var("a", INDEX)),)
    assert map_exprs(body, lambda e: e) is body
    out = map_exprs(body, lambda e: Var("b", INDEX))
    assert isinstance(out, tuple) and out[0].value.name == "b"
