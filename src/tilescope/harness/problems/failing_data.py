"""The data a wrong answer leaves for ``tilescope triage``: the inputs of the program call that
wrote the model's output, with the reference model's output as that call's golden.

The reference model gives one golden, for the model's output; the solution's program calls in
between have none. So the data are saved for one call, the one the wrong output came from:

- the latest recorded call one of whose Out/InOut tensors the output is: the tensor itself or a
  view of it (sharing its memory), else a copy of its values (a reshape, or a dtype conversion on
  the host such as ``idx.to(torch.int64)``);
- ``in/`` holds that call's inputs as it got them, ``out/`` the reference's output as that
  parameter holds it (reshaped and converted to its dtype; around a view, the values the call
  wrote); the call's other Out parameters get what the call wrote, so only the model's output is
  judged; ``meta.json`` KernelBench's tolerance for the output's dtype and the trial's seed;
- the ``second/`` input set (what ``triage --fix`` verifies an edit on too) is the same call in
  another trial, when one made it.

An output no call wrote (the solution computed it in torch) saves nothing, and says so; when an
earlier call computed that call's inputs wrong, triage of its build finds them right: the note
says the data hold that call alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.data import DataError, Second, save_snapshot
from tilescope.analysis.golden_trace import GoldenTrace, record_golden
from tilescope.build.paths import DATA_DIR, inside
from tilescope.build.state import source_hashes
from tilescope.harness.problems.problem_eval import Outcome, Trial, tolerance
from tilescope.launch.program_calls import ProgramCall


@dataclass(frozen=True)
class Source:
    """Where a model output came from: a call, its parameter, and whether the output shares its
    memory (a view) or copies its values."""

    call: ProgramCall
    index: int  # the parameter's position
    view: bool


def _within(out: torch.Tensor, arg: torch.Tensor) -> bool:
    """Whether every element of ``out`` lies in the memory of the contiguous tensor ``arg``."""
    if not arg.is_contiguous() or out.dtype != arg.dtype:
        return False
    if out.untyped_storage().data_ptr() != arg.untyped_storage().data_ptr():
        return False
    if out.numel() == 0:
        return False
    lo = hi = out.storage_offset()
    for size, stride in zip(out.shape, out.stride()):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return arg.storage_offset() <= lo and hi < arg.storage_offset() + arg.numel()


def _copies(out: torch.Tensor, arg: torch.Tensor) -> bool:
    """Whether ``out`` holds ``arg``'s values, reshaped or converted to its dtype."""
    if out.numel() != arg.numel():
        return False
    try:
        return bool(torch.equal(arg.detach().reshape(-1).to(out.dtype), out.detach().reshape(-1)))
    except (RuntimeError, TypeError):
        return False


def source_of(out: torch.Tensor, calls: list[ProgramCall]) -> Source | None:
    """The call (latest first) and parameter ``out`` came from (the module docstring's rule)."""
    for view in (True, False):
        for call in reversed(calls):
            for i, (spec, arg) in enumerate(zip(call.build.args, call.args)):
                if spec.is_output and isinstance(arg, torch.Tensor):
                    if _within(out, arg) if view else _copies(out, arg):
                        return Source(call, i, view)
    return None


def _golden(source: Source, out: torch.Tensor | None, reference: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every Out parameter's golden: the reference where the output came from, else what the call wrote."""
    call = source.call
    golden = {}
    for i, (spec, arg) in enumerate(zip(call.build.args, call.args)):
        if not spec.is_output:
            continue
        value = arg.detach().clone()
        if i == source.index and source.view and out is not None:
            offset = out.storage_offset() - arg.storage_offset()
            value.as_strided(out.shape, out.stride(), offset).copy_(reference.to(value.dtype))
        elif i == source.index:
            value = reference.detach().reshape(value.shape).to(value.dtype).clone()
        golden[spec.name] = value
    return golden


def _second(trial: Trial | None, first: Source) -> Second | None:
    """The same call in another trial, with that trial's reference output as its golden."""
    if trial is None:
        return None
    for out, ref in zip(trial.solution, trial.reference):
        found = source_of(out, trial.calls)
        if (
            found is not None
            and found.call.build.work_dir == first.call.build.work_dir
            and found.index == first.index
        ):
            return Second(dict(found.call.before), _golden(found, out, ref), trial.seed)
    return None


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.numel() == b.numel() and bool(torch.equal(a.reshape(-1), b.reshape(-1)))


def _trace(model: Any, trial: Trial, call: ProgramCall) -> GoldenTrace | None:
    """The reference model's forward on this trial's inputs as a golden trace, each of the call's
    inputs named by the reference's tensor (an input or a parameter) that holds its values, so
    localize can align the kernels with the reference's own steps; None when it cannot be recorded."""
    if model is None:
        return None
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in trial.inputs]
    held = [a for a in args if isinstance(a, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        held += [*model.parameters(), *model.buffers()]
    values: dict[str, Any] = {}
    for spec in call.build.args:
        value = call.before.get(spec.name)
        if spec.is_input and spec.shape is not None and isinstance(value, torch.Tensor):
            match = next((t for t in held if _same_values(t.detach(), value)), None)
            if match is not None:
                values[spec.name] = match
    try:
        with torch.no_grad():
            return record_golden(lambda _values: model(*args), values)
    except Exception:  # noqa: BLE001 - the data are saved without the trace; triage says it has none
        return None


def _failed_source(trial: Trial) -> Source | None:
    """The failed call (the last one) and its Out parameter of the reference output's size, when
    exactly one has it."""
    call = trial.calls[-1]
    for ref in trial.reference:
        fits = [i for i, (spec, arg) in enumerate(zip(call.build.args, call.args))
                if spec.is_output and isinstance(arg, torch.Tensor) and arg.numel() == ref.numel()]  # fmt: skip
        if len(fits) == 1:
            return Source(call, fits[0], view=False)
    return None


def _where(outcome: Outcome, trial: Trial) -> tuple[Source, torch.Tensor | None, torch.Tensor] | str:
    """The call whose data are saved, the output (None for a failed call) and its reference; or why none."""
    if not trial.calls:
        return "ModelNew.forward called no tilescope program"
    if trial.failed:
        found = _failed_source(trial)
        if found is None:
            return ("no Out parameter of the failed call has the size of the model's output, so its golden is "
                    "unknown; replay the failing task as its report says")  # fmt: skip
        ref = next(r for r in trial.reference if r.numel() == found.call.args[found.index].numel())
        return found, None, ref
    i = trial.wrong or 0
    out, ref = trial.solution[i], trial.reference[i]
    found = source_of(out, trial.calls)
    if found is None:
        return (f"the output is no Out tensor of the {len(trial.calls)} tilescope program call(s) ModelNew.forward "
                "made (nor a view, reshape or dtype conversion of one); return the tensor the program wrote")  # fmt: skip
    return found, out, ref


def save_failing_data(outcome: Outcome) -> None:
    """Save the first wrong (or failed) trial's data into the build of the call its output came from
    (``outcome.saved``), or say why nothing was saved (``outcome.saved_note``)."""
    trial = outcome.wrong_trial
    if trial is None:
        return
    where = _where(outcome, trial)
    if isinstance(where, str):
        outcome.saved_note = f"no data saved for triage: {where}"
        return
    source, out, ref = where
    call = source.call
    tol = tolerance(ref.dtype)
    meta: dict[str, Any] = {"rtol": tol, "atol": tol, "seed": trial.seed, "problem": outcome.pair.name,
                            "sources": source_hashes(call.build.work_dir, call.build.config)}  # fmt: skip
    try:
        save_snapshot(inside(call.build.work_dir, DATA_DIR), list(call.build.args), dict(call.before),
                      _golden(source, out, ref), meta, trace=_trace(outcome.model, trial, call),
                      second=_second(outcome.other_trial, source))  # fmt: skip
    except DataError as e:
        outcome.saved_note = f"no data saved for triage: {e}"
        return
    outcome.saved = str(Path(call.build.work_dir))
    if len(trial.calls) > 1:
        position = next(k for k, c in enumerate(trial.calls) if c is call) + 1
        outcome.saved_note = (
            f"the data hold call {position} of {len(trial.calls)} (the one that wrote the output), on the inputs "
            "the calls before it made"
        )


__all__ = ["Source", "save_failing_data", "source_of"]
