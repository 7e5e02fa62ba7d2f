"""One problem evaluated as KernelBench evaluates a solution: correctness over seeded trials, then
the solution timed against the eager reference in the same process.

Invariants (KernelBench's ``eval_kernel_against_ref``):
- ``torch.manual_seed(seed)``, then ``get_init_inputs()``; ``torch.manual_seed(seed)`` before
  ``Model(*init_inputs)`` and again before ``ModelNew(*init_inputs)``, so a solution that makes its
  parameters as the reference does gets the same values. Everything runs under ``torch.no_grad()``.
- The trials' seeds are drawn from ``seed`` (``torch.randint(0, 2**32 - 1)`` once per trial); each
  trial seeds torch with its own and calls ``get_inputs()``; each model gets its own copy of them.
- An output is correct when its shape and dtype are the reference's and
  ``torch.allclose(reference, output, atol, rtol)`` holds, atol = rtol = 1e-2 for an f16/bf16
  reference output and 1e-4 otherwise. A shape or dtype mismatch, and anything a call raises,
  ends the trials; a value mismatch is counted and the trials go on.
- The solution's calls of tilescope programs are recorded during the trials
  (``launch.program_calls``), for the data a failure saves (``failing_data``), never while timed.
- Timing only runs for a problem whose every trial is correct: one warm-up call of each model,
  then the median of ``perf_trials`` timed calls each, on the first trial's inputs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope import knobs
from tilescope.errors import RuntimeFailure
from tilescope.harness.problems.pairing import Pair
from tilescope.harness.problems.problem_files import ProblemError, call_failure, load_reference, load_solution
from tilescope.launch.program_calls import ProgramCall, recording

KERNELBENCH_SEED = 42
LOW_PRECISION = (torch.float16, torch.bfloat16)


def tolerance(dtype: torch.dtype) -> float:
    """KernelBench's atol and rtol for an output of ``dtype``: 1e-2 for f16/bf16, else 1e-4."""
    return 1e-2 if dtype in LOW_PRECISION else 1e-4


@dataclass
class Trial:
    """One correctness trial: its seed, the program calls the solution made, both models' outputs."""

    seed: int
    inputs: list[Any]  # get_inputs() of this trial, untouched (each model got a copy)
    calls: list[ProgramCall]
    reference: list[torch.Tensor]
    solution: list[torch.Tensor]
    wrong: int | None = None  # the first output that mismatches (None: every output is correct)
    failed: bool = False  # a program call failed at run time (its last call); no outputs


@dataclass
class Outcome:
    """What one problem came to: its correct trials, its worst error, its times, or why it failed."""

    pair: Pair
    trials: int
    passed: int = 0
    max_abs_error: float | None = None
    tol: float | None = None  # atol = rtol
    solution_ms: float | None = None
    eager_ms: float | None = None
    error: str | None = None  # why it failed: the first wrong trial, or what raised
    saved: str | None = None  # the build whose data were saved for `tilescope triage`
    saved_note: str | None = None  # why no data were saved for a wrong answer
    triage: Any = None  # --triage: the report
    model: Any = field(
        default=None, repr=False
    )  # the reference model (its golden's steps are traced for triage)
    wrong_trial: Trial | None = field(
        default=None, repr=False
    )  # the first wrong (or failed) trial: its data are saved
    other_trial: Trial | None = field(
        default=None, repr=False
    )  # a trial besides it (the data's second input set)

    @property
    def correct(self) -> bool:
        """Every trial correct, and nothing raised."""
        return self.error is None and self.passed == self.trials

    @property
    def speedup(self) -> float | None:
        """eager time / solution time, when both were timed."""
        if self.solution_ms is None or self.eager_ms is None or self.solution_ms <= 0:
            return None
        return self.eager_ms / self.solution_ms


def _outputs(value: Any) -> list[torch.Tensor] | None:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return None


def _describe(value: Any) -> str:
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)} ({', '.join(sorted({type(v).__name__ for v in value}))})"
    return f"a {type(value).__name__}"


def _index(flat: int, shape: torch.Size) -> list[int]:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return out[::-1]


def compare(
    reference: torch.Tensor, output: torch.Tensor, what: str
) -> tuple[str | None, float | None, bool]:
    """Why ``output`` is not ``reference`` by KernelBench's rule (None: it is), the largest absolute
    error, and whether the mismatch is fatal (shape or dtype)."""
    if output.shape != reference.shape:
        return f"{what} has shape {list(output.shape)}, the reference's {list(reference.shape)}", None, True
    if output.dtype != reference.dtype:
        return (f"{what} has dtype {output.dtype}, the reference's {reference.dtype}: convert it on the host "
                f"(out.to({reference.dtype}))"), None, True  # fmt: skip
    tol = tolerance(reference.dtype)
    out, ref = output.detach().cpu(), reference.detach().cpu()
    if out.numel() == 0:
        return None, 0.0, False
    diff = (out.double() - ref.double()).abs().reshape(-1)
    nan = diff.isnan()
    max_err = float("nan") if nan.any() else float(diff.max())
    if torch.allclose(ref, out, atol=tol, rtol=tol):
        return None, max_err, False
    bad = int((~torch.isclose(ref, out, atol=tol, rtol=tol)).sum())
    worst = int(nan.nonzero()[0, 0]) if nan.any() else int(diff.argmax())
    at = _index(worst, out.shape)
    got, want = out.reshape(-1)[worst].item(), ref.reshape(-1)[worst].item()
    return (f"{what}: {bad} of {out.numel()} elements outside atol=rtol={tol:g}; max abs error {max_err:.4g} at "
            f"{at} (got {got:.6g}, expected {want:.6g})"), max_err, False  # fmt: skip


def _worst(a: float | None, b: float) -> float:
    """The larger error; NaN (an output that is NaN where the reference is not) is the worst."""
    if a is None:
        return b
    return float("nan") if math.isnan(a) or math.isnan(b) else max(a, b)


def _copy(values: list[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _user(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; what it raises is a ProblemError naming ``what`` and the user's line. A class
    (a model) is named by its ``__init__``, a model by its ``forward``."""
    named = (
        fn.__init__ if isinstance(fn, type) else type(fn).forward if isinstance(fn, torch.nn.Module) else fn
    )
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - whatever user code raises is this problem's failure
        raise ProblemError(call_failure(what, named, e)) from e


def _median_ms(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def evaluate(pair: Pair, trials: int, seed: int, perf_trials: int, run_options: dict[str, Any]) -> Outcome:
    """Evaluate one problem (see the module docstring); ``run_options`` are the knobs the solution's
    program calls run with (``platform``, ``num_workers``, ..., compile knobs too). Never raises for
    what the user's files do: that is the outcome's ``error``."""
    outcome = Outcome(pair, trials)
    try:
        with torch.no_grad():
            _evaluate(outcome, trials, seed, perf_trials, run_options)
    except ProblemError as e:
        outcome.error = str(e)
    return outcome


def _evaluate(
    outcome: Outcome, trials: int, seed: int, perf_trials: int, run_options: dict[str, Any]
) -> None:
    pair = outcome.pair
    if pair.reference is None:
        raise ProblemError(f"{pair.solution}: no reference {pair.expected_reference} (a solution SOLUTIONS/REL.py is "
                           "paired with the reference REFS/REL.py): add it, or check the solution's name")  # fmt: skip
    ref = load_reference(pair.reference)
    new_cls = load_solution(pair.solution)
    torch.manual_seed(seed)
    init = _user("the reference's", ref.get_init_inputs)
    if not isinstance(init, list | tuple):
        raise ProblemError(f"{pair.reference}: get_init_inputs() returned {_describe(init)}; it returns a list of "
                           "Model's constructor arguments ([] for none)")  # fmt: skip
    torch.manual_seed(seed)
    model = outcome.model = _user("the reference's", ref.model, *_copy(list(init)))
    with knobs.override(**run_options):
        torch.manual_seed(seed)
        new = _user("the solution's", new_cls, *_copy(list(init)))
    torch.manual_seed(seed)
    seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]
    first_inputs = None
    for k, trial_seed in enumerate(seeds):
        torch.manual_seed(trial_seed)
        inputs = _user("the reference's", ref.get_inputs)
        if not isinstance(inputs, list | tuple):
            raise ProblemError(f"{pair.reference}: get_inputs() returned {_describe(inputs)}; it returns the list of "
                               "Model.forward's arguments")  # fmt: skip
        first_inputs = first_inputs if first_inputs is not None else list(inputs)
        trial = _trial(outcome, model, new, list(inputs), trial_seed, run_options, k)
        if trial.wrong is None:
            outcome.passed += 1
            if outcome.other_trial is None:
                outcome.other_trial = trial
        elif outcome.wrong_trial is None:
            outcome.wrong_trial = trial
        elif outcome.other_trial is None:
            outcome.other_trial = trial
    if outcome.correct and perf_trials > 0 and first_inputs is not None:
        with knobs.override(**run_options):
            a = _copy(first_inputs)
            outcome.solution_ms = _median_ms(lambda: _user("the solution's", new, *a), perf_trials)
        b = _copy(first_inputs)
        outcome.eager_ms = _median_ms(lambda: model(*b), perf_trials)


def _trial(outcome: Outcome, model: Any, new: Any, inputs: list[Any], seed: int, run_options: dict[str, Any],
           k: int) -> Trial:  # fmt: skip
    """One trial, its value mismatches counted in ``outcome``; a ProblemError for what ends the trials."""
    pair = outcome.pair
    expected = _user("the reference's", model, *_copy(inputs))
    refs = _outputs(expected)
    if refs is None:
        raise ProblemError(f"{pair.reference}: Model.forward returned {_describe(expected)}; a model returns a tensor "
                           "or a tuple of tensors")  # fmt: skip
    with knobs.override(**run_options), recording() as calls:
        try:
            got = _user("the solution's", new, *_copy(inputs))
        except ProblemError as e:
            if isinstance(e.__cause__, RuntimeFailure) and calls and outcome.wrong_trial is None:
                outcome.wrong_trial = Trial(seed, inputs, list(calls), refs, [], failed=True)
            raise
    outs = _outputs(got)
    label = f"trial {k + 1} of {outcome.trials} (seed {seed})"
    if outs is None or len(outs) != len(refs):
        what = "a tensor" if len(refs) == 1 else f"a tuple of {len(refs)} tensors"
        raise ProblemError(f"{pair.solution}: {label}: ModelNew.forward returned {_describe(got)}, the reference "
                           f"{what}")  # fmt: skip
    trial = Trial(seed, inputs, list(calls), refs, outs)
    for i, (r, o) in enumerate(zip(refs, outs)):
        what = "output" if len(refs) == 1 else f"output {i}"
        reason, err, fatal = compare(r, o, what)
        if err is not None:
            outcome.max_abs_error = _worst(outcome.max_abs_error, err)
        outcome.tol = tolerance(r.dtype) if outcome.tol is None else outcome.tol
        if reason is None:
            continue
        if fatal:
            raise ProblemError(f"{pair.solution}: {label}: {reason}")
        if trial.wrong is None:
            trial.wrong = i
            if outcome.error is None:
                outcome.error = f"{label}: {reason}"
    return trial


__all__ = ["KERNELBENCH_SEED", "Outcome", "Trial", "compare", "evaluate", "tolerance"]
