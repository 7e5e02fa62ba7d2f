"""The golden as a trace of intermediates: ``golden_fn`` run once more under a torch dispatch
mode that keeps every value it computes, with the op that made it, the values it was made from
and the line of the user's golden that made it.

A kernel author's golden is already a step-by-step computation of what the kernels should
compute (``m = x.amax(-1)``, ``shifted = x - m``, ``e = shifted.exp()`` ...). Kept as a trace,
each step is a reference that localize aligns the kernels' tiles with (``localize/align.py``),
so a wrong op is named without the user writing a probe or a named reference.

Invariants:
- The trace is recorded on a copy of the inputs; what ``golden_fn`` returns or fills is not
  used (the golden the harness compares with is computed as before).
- Composite ops (``F.group_norm``, ``F.layer_norm``, softmax and log-softmax, ``F.cross_entropy``,
  ``F.scaled_dot_product_attention``, ``F.conv2d`` as unfold and matmul, ``addmm`` ...) are kept
  whole *and* decomposed into the primitives torch decomposes them into, recorded too: a kernel
  computes the primitives.
- Views and copies (reshape, permute, slicing, ``copy_`` into an output, a cast to the same
  dtype) make no value of their own: they name the value they view. Factory ops (``zeros``,
  ``arange``) are constants, not kept.
- Every kept value holds at most ``budget`` bytes in all (``TRACE_BUDGET``); a value past it is
  listed with its op and line but without its tensor (``dropped``).
- The file (``data/golden/trace.pt``) loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tilescope.analysis.user_code import _library_dirs
from tilescope.build.paths import GOLDEN_TRACE, atomic_save, inside

TRACE_BUDGET = 256 * 2**20  # bytes of kept values
_FORMAT = 1

aten = torch.ops.aten
_NOT_VALUES = {  # ops whose result is a view, a copy or a constant: no value of its own
    "copy_", "detach", "alias", "lift_fresh", "lift_fresh_copy", "clone", "contiguous", "empty", "empty_like",
    "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "new_zeros", "new_ones", "new_full", "arange", "scalar_tensor", "fill_", "zero_", "randn", "rand",
    "randint", "randn_like", "rand_like", "normal_", "uniform_", "_local_scalar_dense", "set_", "resize_",
}  # fmt: skip


def _composites() -> dict[Any, Callable[..., Any]]:
    from torch._decomp import get_decompositions

    names = (
        "native_group_norm", "native_layer_norm", "_log_softmax", "_softmax", "nll_loss_forward", "logsumexp",
        "_scaled_dot_product_flash_attention_for_cpu", "im2col", "addmm", "baddbmm", "var_mean", "mse_loss",
        "_native_batch_norm_legit_no_training", "_fused_rms_norm", "linalg_vector_norm", "var", "std", "mean",
        "addcmul", "lerp", "rsub", "log_sigmoid_forward", "binary_cross_entropy", "smooth_l1_loss", "huber_loss",
    )  # fmt: skip
    table = get_decompositions([getattr(aten, n) for n in names if hasattr(aten, n)])
    table[aten.convolution.default] = _convolution
    return table


def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """A 2-D convolution as a kernel author writes one: unfold (im2col) and a matmul."""
    if transposed or x.dim() != 4 or groups != 1:
        return NotImplemented
    n, _, h, w = x.shape
    o, _, kh, kw = weight.shape
    cols = F.unfold(x, (kh, kw), dilation=tuple(dilation), padding=tuple(padding), stride=tuple(stride))
    out = weight.reshape(o, -1) @ cols  # [N, O, L]
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = out.reshape(n, o, oh, ow)
    return out if bias is None else out + bias.reshape(1, o, 1, 1)


@dataclass
class GoldenValue:
    """One value the golden computed (or one of its inputs: ``op`` ``input``)."""

    index: int
    op: str  # the torch op that made it: ``sub``, ``amax``, ``native_group_norm``; ``input`` for an argument
    line: str | None  # ``file:line`` of the user's golden that computed it
    text: str  # that line's source
    inputs: tuple[int, ...]  # the values it was computed from (indices; inputs' views name their value)
    value: torch.Tensor | None  # None: dropped (over the budget)
    name: str | None = None  # an input's argument name; a composite's parts: ``<op>[i]``

    def where(self) -> str:
        """How a report names it: ``'sub' at golden.py:14`` (an input: ``input 'x'``)."""
        if self.op == "input":
            return f"input {self.name!r}"
        at = f" at {_short(self.line)}" if self.line else ""
        return f"{self.op!r}{at}"


@dataclass
class GoldenTrace:
    """Every value ``golden_fn`` computed, in the order it computed them."""

    values: list[GoldenValue] = field(default_factory=list)
    dropped: int = 0  # values past the budget, kept without their tensor

    def save(self, path: Path) -> None:
        """Write the trace to ``path`` (loadable with weights_only); the inputs' values are not
        written (the data directory's ``in/`` holds them)."""
        rows = [
            {"op": v.op, "line": v.line or "", "text": v.text, "inputs": list(v.inputs), "name": v.name or "",
             "value": v.value if v.value is not None and v.op != "input" else torch.empty(0)}
            for v in self.values
        ]  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save({"format": _FORMAT, "dropped": self.dropped, "values": rows}, path)

    @staticmethod
    def load(path: Path) -> GoldenTrace:
        """The trace saved at ``path``. ValueError when it is not one."""
        raw = torch.load(path, weights_only=True)
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT or not isinstance(raw.get("values"), list):
            raise ValueError(f"{path} is not a golden trace of this tilescope (format {_FORMAT})")
        out = GoldenTrace(dropped=int(raw.get("dropped", 0)))
        for i, r in enumerate(raw["values"]):
            value = r["value"] if r["value"].numel() and r["op"] != "input" else None
            out.values.append(GoldenValue(i, r["op"], r["line"] or None, r["text"], tuple(r["inputs"]), value,
                                          r["name"] or None))  # fmt: skip
        return out


    def made(self, nan: bool) -> list[GoldenValue]:
        """The values that hold NaN (``nan``) or ±Inf (else) that none of the values they were
        made from holds, in the order golden_fn computed them: where its steps made them (an
        input holding them is its own). A value over the budget is not looked at."""
        test = torch.isnan if nan else torch.isinf
        holding: set[int] = set()
        out = []
        for v in self.values:
            t = v.value
            if t is None or not t.is_floating_point() or not bool(test(t).any()):
                continue
            holding.add(v.index)
            if not any(i in holding for i in v.inputs):
                out.append(v)
        return out


def _short(line: str) -> str:
    file, _, no = line.rpartition(":")
    rel = os.path.relpath(file) if os.path.isabs(file) else file
    return f"{rel if len(rel) < len(file) else file}:{no}"


class _Recorder(TorchDispatchMode):
    def __init__(self, budget: int):
        super().__init__()
        self.trace = GoldenTrace()
        self.budget = budget
        self.of: dict[int, int] = {}  # id(tensor) -> value index (views and in-place results included)
        self.keep: list[torch.Tensor] = []  # every tensor an id names, alive until the recording ends
        self.composites = _composites()
        self.libs = _library_dirs()
        self.top: Any = None  # record_golden's frame: ops outside the user's code below it are not the golden's

    def name(self, t: torch.Tensor, index: int) -> None:
        self.of[id(t)] = index
        self.keep.append(t)

    def add_input(self, name: str, t: torch.Tensor) -> None:
        self.name(t, self.add("input", t, (), None, "", name))

    def add(self, op: str, t: torch.Tensor, inputs: tuple[int, ...], line: str | None, text: str,
            name: str | None = None) -> int:  # fmt: skip
        index = len(self.trace.values)
        value: torch.Tensor | None = t.detach().clone()
        size = value.numel() * value.element_size()
        if op != "input" and size > self.budget:
            value = None
            self.trace.dropped += 1
        elif op != "input":
            self.budget -= size
        self.trace.values.append(GoldenValue(index, op, line, text, inputs, value, name))
        return index

    def user_line(self) -> tuple[str | None, str] | None:
        """The innermost line of the user's code computing now; None when the op is not the
        golden's own (the harness's code around it)."""
        f = sys._getframe(2)
        while f is not None and f is not self.top:
            file = f.f_code.co_filename
            if not os.path.realpath(file).startswith(self.libs) and not file.startswith("<"):
                return f"{file}:{f.f_lineno}", linecache.getline(file, f.f_lineno).strip()
            f = f.f_back
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket.__name__
        parts = None
        if func in self.composites:
            with self:
                parts = self.composites[func](*args, **kwargs)
        elif func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
            with self:
                parts = func.decompose(*args, **kwargs)
        out = func(*args, **kwargs) if parts is None or parts is NotImplemented else parts
        self.record(op, func, args, kwargs, out)
        return out

    def record(self, op: str, func, args, kwargs, out) -> None:
        flat = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
        flat += [x for a in (*args, *kwargs.values()) if isinstance(a, list | tuple) for x in a if torch.is_tensor(x)]
        inputs = tuple(dict.fromkeys(self.of[id(a)] for a in flat if id(a) in self.of))
        outs = [out] if torch.is_tensor(out) else [o for o in out if torch.is_tensor(o)] if isinstance(out, tuple | list) else []
        copy = op.endswith("_copy") and op != "_to_copy"  # a view's copying variant (slice_copy, expand_copy)
        if func.is_view or op in _NOT_VALUES or copy or (op == "_to_copy" and _same_dtype(args, out)):
            source = next(iter(inputs), None)
            for o in outs:
                if source is not None and op not in ("zeros", "ones", "full", "arange", "empty"):
                    self.name(o, source)
            return
        where = self.user_line()
        if where is None:
            return
        line, text = where
        for i, o in enumerate(outs):
            if id(o) in self.of and not op.endswith("_"):
                continue  # a composite's result is its last part (already recorded, under the part's op)
            name = f"{op}[{i}]" if len(outs) > 1 else None
            self.name(o, self.add(op, o, inputs, line, text, name))


def _same_dtype(args, out) -> bool:
    return bool(args) and torch.is_tensor(args[0]) and torch.is_tensor(out) and args[0].dtype == out.dtype


def record_golden(golden: Callable[[dict[str, Any]], Any], values: dict[str, Any], budget: int = TRACE_BUDGET) -> GoldenTrace:
    """The trace of ``golden`` run on ``values`` (copies of the program's inputs, filled in place
    as golden_fn fills them). Whatever ``golden`` raises propagates."""
    rec = _Recorder(budget)
    rec.top = sys._getframe()
    for name, v in values.items():
        if torch.is_tensor(v):
            rec.add_input(name, v)
    with torch.no_grad(), rec:
        golden(values)
    rec.keep.clear()
    return rec.trace


def save_trace(data_dir: Path, trace: GoldenTrace) -> Path:
    """Write ``trace`` into the data directory ``data_dir``; its path."""
    path = inside(data_dir, GOLDEN_TRACE)
    trace.save(path)
    return path


def load_trace(data_dir: str | os.PathLike, inputs: dict[str, Any]) -> tuple[GoldenTrace | None, str | None]:
    """The golden trace saved with a data directory, its inputs' values taken from ``inputs``
    (the snapshot's), or None and why there is none."""
    path = inside(data_dir, GOLDEN_TRACE)
    if not path.is_file():
        return None, (
            f"{Path(data_dir)} holds no trace of the golden ({GOLDEN_TRACE}): saved by an older tilescope, or with "
            "the golden loaded from data; save the data again (--save-data) to let localize align the kernels "
            "with the golden's own steps"
        )
    try:
        trace = GoldenTrace.load(path)
        for v in trace.values:
            if v.op == "input" and torch.is_tensor(inputs.get(v.name)):
                v.value = inputs[v.name]
        return trace, None
    except Exception as e:  # noqa: BLE001 - a corrupt trace is one limitation, not a failed localize
        return None, f"{path} cannot be read ({type(e).__name__}: {e}); save the data again (--save-data)"


__all__ = ["TRACE_BUDGET", "GoldenTrace", "GoldenValue", "load_trace", "record_golden", "save_trace"]
