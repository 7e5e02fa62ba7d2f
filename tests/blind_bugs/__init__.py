"""Bugs written blind: realistic kernels with one mistake of the kind kernel authors make (masks,
off-by-one bounds, wrong slices, swapped operands, narrow accumulators, missing guards), each
written as a user would, by someone who had not read tilescope's analysis code, with where the
mistake is. tests/analysis/test_blind_bugs.py runs ``tilescope triage`` on every one and asserts
it names the category, the kernel, the op and the DSL line; ``benchmarks/blind_bugs.py`` prints
the table of what triage named and how long it took.

A bug's culprit line is named by the DSL function holding it and a text on that line (so the
programs can move without the expectations changing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BlindBug:
    """One program with one mistake, the data it fails on, and where the mistake is."""

    name: str  # a short id: the test's
    what: str  # the mistake, in words
    pattern: str  # mask, off_by_one, wrong_slice, swapped_operands, narrow_accumulator, missing_guard, nan, ...
    program: Any  # the @ts.jit program
    specs: list  # its argument specs (TensorSpec / ScalarSpec)
    golden: Callable[[dict[str, Any]], None]  # fills the outputs of the dict in place
    rtol: float
    atol: float
    category: str  # what triage should call it: algorithm, nan, precision, out_of_bounds, uninitialized, ...
    kernel: str | None  # the kernel holding the mistake (None: the orchestration's own code)
    op: str  # the op on the culprit line that is wrong (load, row_sum, sub, where, cast, call, ...)
    line: tuple[Any, str]  # the DSL function holding the culprit line and a text unique to that line
    fixed: str  # the culprit line as it should read
    verdict: str | None = None  # for precision: guilty
