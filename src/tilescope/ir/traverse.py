"""The one traversal of the IR: children, pre-order walks and a structural map.

Invariants:
- Children are derived from the dataclass fields, never listed by hand. A field is a child
  field when its annotation names an IR node class (a class of ``ir.nodes``): a node, an
  optional node, or a tuple of nodes. A new node class or a new field is traversed without a
  change here; ``loc``, ``type`` and plain values (names, ops, sizes) are never children.
- Children come in field order, which is evaluation order (``BinOp``: lhs then rhs; ``For``:
  start, stop, step, then the body; ``Submit``: args, deps, dumps).
- Expressions are the members of the ``Expr`` union, statements those of ``Stmt``; every other
  node class (``SliceRange``, ``Param``, ``Kernel``, ``Program``) is a container: looking for
  expressions or statements looks through it (a ``Slice``'s expressions are its tensor and
  the bounds of its ranges).
- Expressions never contain statements. The expressions of a statement (``child_exprs``) are
  its own, not those of its nested bodies; ``walk_exprs`` reaches every one, nested included.
- Node classes are used exactly (never subclassed): kinds are told apart by ``type(x)``, and
  each class's child fields are read from its annotations once, at import.
- Walks are pre-order and iterative (a deep expression does not exhaust the stack).
- ``map_exprs`` / ``map_stmts`` rebuild bottom-up with ``dataclasses.replace`` and return the
  very same object when nothing changed, so ``new is old`` tells whether a rewrite did
  anything, and untouched subtrees are shared.
- Every function takes a node or an iterable of nodes (a body); the maps return a tuple for a
  tuple.
- The front-end accepts expressions nested at most ``MAX_EXPR_DEPTH`` deep. What recurses along
  an expression (the front-end, the maps, type rules, the printer, codegen, the interpreter, a
  structural hash) runs inside ``recursion_room()``, which raises Python's recursion limit —
  never lowers it — so that depth fits above the caller's stack.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import typing
from collections.abc import Callable, Iterator

from tilescope.ir import nodes
from tilescope.ir.nodes import Expr, Stmt

EXPR_TYPES: tuple[type, ...] = typing.get_args(Expr)
STMT_TYPES: tuple[type, ...] = typing.get_args(Stmt)
NODE_TYPES: tuple[type, ...] = tuple(
    c
    for c in vars(nodes).values()
    if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == nodes.__name__
)
CONTAINER_TYPES: tuple[type, ...] = tuple(c for c in NODE_TYPES if c not in EXPR_TYPES + STMT_TYPES)

_EXPRS = frozenset(EXPR_TYPES)
_STMTS = frozenset(STMT_TYPES)
_NODES = frozenset(NODE_TYPES)

# The deepest nesting of one expression the compiler takes (``x + x + ... + x`` of 2000 terms):
# deeper is an error that asks for temporaries. Recursing over one level costs a few frames.
MAX_EXPR_DEPTH = 2000
_FRAMES_PER_LEVEL = 5
_room_lock = threading.Lock()
_room_users = 0
_room_limits = (0, 0)  # (the limit before the first user entered, the limit set for the users)


def _stack_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


@contextlib.contextmanager
def recursion_room() -> Iterator[None]:
    """Python's recursion limit raised (never lowered) so that recursing over an expression
    nested ``MAX_EXPR_DEPTH`` deep fits above the current stack; usable as a decorator. The
    limit goes back to what it was when the last thread inside leaves (unless someone else
    changed it meanwhile)."""
    global _room_users, _room_limits
    need = _stack_depth() + MAX_EXPR_DEPTH * _FRAMES_PER_LEVEL + 500
    with _room_lock:
        before = sys.getrecursionlimit()
        if _room_users == 0:
            _room_limits = (before, before)
        _room_users += 1
        if before < need:
            sys.setrecursionlimit(need)
            _room_limits = (_room_limits[0], need)
    try:
        yield
    finally:
        with _room_lock:
            _room_users -= 1
            saved, ours = _room_limits
            if _room_users == 0 and sys.getrecursionlimit() == ours != saved:
                with contextlib.suppress(RecursionError):  # a deeper stack elsewhere keeps the room
                    sys.setrecursionlimit(saved)


Node = typing.Any  # any instance of NODE_TYPES
Roots = typing.Any  # a node, or an iterable of nodes


def is_expr(x: object) -> bool:
    """Whether ``x`` is an expression node (a member of the ``Expr`` union)."""
    return type(x) in _EXPRS


def is_stmt(x: object) -> bool:
    """Whether ``x`` is a statement node (a member of the ``Stmt`` union)."""
    return type(x) in _STMTS


def _node_classes(hint: object) -> frozenset[type]:
    """The IR node classes an annotation names (through unions, optionals and tuples)."""
    if hint in _NODES:
        return frozenset((hint,))
    found: frozenset[type] = frozenset()
    for arg in typing.get_args(hint):
        found |= _node_classes(arg)
    return found


def _spec(cls: type) -> tuple[tuple[str, frozenset[type]], ...]:
    hints = typing.get_type_hints(cls)
    fields = ((f.name, _node_classes(hints[f.name])) for f in dataclasses.fields(cls))
    return tuple((name, kinds) for name, kinds in fields if kinds)


# Per node class, computed once: its child fields with the node classes each may hold, their
# names, the names of its statement bodies, and whether its children are all expressions.
_SPECS = {cls: _spec(cls) for cls in NODE_TYPES}
_NAMES = {cls: tuple(name for name, _ in spec) for cls, spec in _SPECS.items()}
_BODIES = {cls: tuple(name for name, kinds in spec if kinds <= _STMTS) for cls, spec in _SPECS.items()}
_ONLY_EXPRS = frozenset(cls for cls, spec in _SPECS.items() if all(kinds <= _EXPRS for _, kinds in spec))


def child_fields(cls: type) -> tuple[tuple[str, frozenset[type]], ...]:
    """``(field name, node classes it may hold)`` of every child field of ``cls``, in order."""
    try:
        return _SPECS[cls]
    except KeyError:
        raise TypeError(f"not an IR node class: {cls!r}") from None


def _kids(node: Node) -> list[Node]:
    try:
        names = _NAMES[type(node)]
    except KeyError:
        raise TypeError(f"not an IR node: {node!r}") from None
    out: list[Node] = []
    for name in names:
        v = getattr(node, name)
        if type(v) is tuple:
            out += v
        elif v is not None:
            out.append(v)
    return out


def children(node: Node) -> tuple[Node, ...]:
    """The direct child nodes of ``node``, in field order."""
    return tuple(_kids(node))


def _kid_exprs(node: Node) -> list[Expr]:
    kids = _kids(node)
    if type(node) in _ONLY_EXPRS:
        return kids
    out: list[Expr] = []
    for c in kids:
        t = type(c)
        if t in _EXPRS:
            out.append(c)
        elif t not in _STMTS:
            out += _kid_exprs(c)
    return out


def child_exprs(node: Node) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``node`` (an expression's operands, a statement's own
    expressions), looking through containers such as ``SliceRange``."""
    return tuple(_kid_exprs(node))


def child_stmts(node: Node) -> tuple[Stmt, ...]:
    """The statements directly nested in ``node`` (a loop's body, both branches of an ``If``,
    a function's body), looking through containers such as ``Kernel``."""
    out: list[Stmt] = []
    for c in _kids(node):
        t = type(c)
        if t in _STMTS:
            out.append(c)
        elif t not in _EXPRS:
            out += child_stmts(c)
    return tuple(out)


def stmt_bodies(node: Node) -> tuple[tuple[Stmt, ...], ...]:
    """Every statement-tuple field of ``node`` (``For.body``; ``If.then`` and ``If.orelse``,
    an empty one included), in field order."""
    return tuple(getattr(node, name) for name in _BODIES[type(node)])


def _roots(root: Roots) -> list[Node]:
    return [root] if type(root) in _NODES else list(root)


def walk(root: Roots) -> Iterator[Node]:
    """Every node under ``root`` (itself included), pre-order, children in field order."""
    stack = _roots(root)[::-1]
    while stack:
        n = stack.pop()
        yield n
        stack += reversed(_kids(n))


def walk_stmts(root: Roots) -> Iterator[Stmt]:
    """Every statement under ``root``, pre-order, nested bodies included."""
    stack = _roots(root)[::-1]
    while stack:
        n = stack.pop()
        t = type(n)
        if t in _EXPRS:
            continue
        if t in _STMTS:
            yield n
        stack += reversed(_kids(n))


def walk_exprs(root: Roots) -> Iterator[Expr]:
    """Every expression under ``root``, pre-order, sub-expressions and nested bodies included:
    a statement's own expressions come before those of the statements nested in it."""
    stack = _roots(root)[::-1]
    while stack:
        n = stack.pop()
        if type(n) in _EXPRS:
            yield n
        stack += reversed(_kids(n))


def map_children(node: Node, fn: Callable[[Node], Node]) -> Node:
    """``node`` with ``fn`` applied to each direct child node; ``node`` itself when ``fn``
    returns every child unchanged. ``fn`` must return a node that fits the field."""
    changes = {}
    for name in _NAMES[type(node)]:
        v = getattr(node, name)
        if type(v) is tuple:
            new = tuple([fn(x) for x in v])
            if any(a is not b for a, b in zip(new, v)):
                changes[name] = new
        elif v is not None:
            new = fn(v)
            if new is not v:
                changes[name] = new
    return dataclasses.replace(node, **changes) if changes else node


def map_bodies(node: Node, fn: Callable[[tuple[Stmt, ...]], tuple[Stmt, ...]]) -> Node:
    """``node`` with ``fn`` applied to each of its statement bodies (those ``stmt_bodies``
    names); ``node`` itself when ``fn`` returns every body unchanged."""
    changes = {}
    for name in _BODIES[type(node)]:
        old = getattr(node, name)
        new = fn(old)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(node, **changes) if changes else node


def _map_roots(root: Roots, go: Callable[[Node], Node]):
    if type(root) in _NODES:
        return go(root)
    old = tuple(root)
    new = tuple(go(x) for x in old)
    return old if all(a is b for a, b in zip(new, old)) else new


def map_exprs(root: Roots, f: Callable[[Expr], Expr]):
    """Rewrite every expression under ``root`` with ``f``, children first (``f`` sees an
    expression whose operands are already rewritten); statements and containers are rebuilt
    around the rewritten expressions, nested bodies included. Fields typed ``Var`` (a load's
    tensor) are expressions too: ``f`` must return a ``Var`` for a ``Var`` there."""

    def go(n: Node) -> Node:
        out = map_children(n, go)
        return f(out) if type(n) in _EXPRS else out

    return _map_roots(root, go)


def map_stmts(root: Roots, f: Callable[[Stmt], Stmt]):
    """Rewrite every statement under ``root`` with ``f``, nested bodies first (``f`` sees a
    loop whose body is already rewritten). Expressions are left as they are."""

    def go(n: Node) -> Node:
        if type(n) in _EXPRS:
            return n
        out = map_children(n, go)
        return f(out) if type(n) in _STMTS else out

    return _map_roots(root, go)
