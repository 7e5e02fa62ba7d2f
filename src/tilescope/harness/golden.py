"""The golden: ``golden_fn`` called on a copy of the inputs, what it filled checked (every output
a tensor filled in place; a name that is no argument kept as the reference of an intermediate or
a probe), and whatever it raises named at the user's line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tilescope.analysis.user_code import GoldenError, call_user, function_name
from tilescope.errors import HarnessError
from tilescope.ir.verifier import PROBE_NAME  # the names a reference of a probe or intermediate may have


def golden_outputs(golden_fn: Callable[[dict[str, Any]], None], names: list[str]):
    """A golden that runs ``golden_fn`` on the values (filling outputs in place) and returns the
    outputs ``names``, and every tensor it added under a name of its own (the reference of an
    intermediate or a probe: ``t["h"] = ...``); whatever ``golden_fn`` raises becomes a GoldenError
    naming the user's line.
    """

    def run(values: dict[str, Any]) -> dict[str, torch.Tensor]:
        given = set(values)
        initial = {n: values[n].clone() for n in names if torch.is_tensor(values.get(n))}
        returned = call_user("golden_fn", golden_fn, values, error=GoldenError)
        fn_name = function_name(golden_fn)
        first = names[0] if names else "y"
        added = [k for k in values if k not in given]
        untouched = [n for n in initial if values.get(n) is not None and _unchanged(values[n], initial[n])]
        if added and untouched:  # NOTE: a misspelt output name, not scratch values kept in the dict
            raise HarnessError(
                f"golden_fn {fn_name} set {', '.join(f't[{k!r}]' for k in added)}, which is not an argument of "
                f"the program, and left the output {', '.join(f't[{n!r}]' for n in untouched)} as it started: "
                f"write the golden into the output in place (t[{untouched[0]!r}][:] = ...)"
            )
        if returned is not None and returned is not values:
            raise HarnessError(
                f"golden_fn {fn_name} returned {_kind(returned)}, which is not used: a golden_fn fills the "
                f"outputs in place (t[{first!r}][:] = ...) and returns None"
            )
        for n in names:
            if not torch.is_tensor(values.get(n)):
                left = f"removed t[{n!r}]" if n not in values else f"left t[{n!r}] as {_kind(values[n])}"
                raise HarnessError(
                    f"golden_fn {fn_name} {left}: the golden of an output must be a torch tensor "
                    f"(fill it in place: t[{n!r}][:] = ...)"
                )
        refs = {k: values[k].detach().cpu() for k in added if torch.is_tensor(values[k]) and PROBE_NAME.fullmatch(k)}
        return {**{n: values[n] for n in names}, **refs}

    return run


def _unchanged(value: Any, initial: torch.Tensor) -> bool:
    """Whether ``value`` is still the tensor ``initial`` was copied from (same shape, dtype and
    values; NaN equal to NaN)."""
    return (
        torch.is_tensor(value)
        and value.shape == initial.shape
        and value.dtype == initial.dtype
        and torch.equal(value.nan_to_num(0.0), initial.nan_to_num(0.0))
        and bool((value.isnan() == initial.isnan()).all())
    )


def _kind(v: Any) -> str:
    """``a Tensor``, ``an ndarray``: what a value is, for messages."""
    name = type(v).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


__all__ = ["golden_outputs"]
