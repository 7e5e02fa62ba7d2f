"""Triage's budget counts its own CPU time: waiting (a machine busy with other work) does not
use it up; computing does."""

import time

from tilescope.analysis.report import Report
from tilescope.analysis.triage.steps import Steps, cpu_seconds


def test_waiting_does_not_use_the_budget_and_computing_does():
    steps = Steps(Report("p", "w", "d", "", ""), 10.0, lambda _: None)
    time.sleep(1.0)  # what a loaded machine does to a step: wall time passes; this process computes nothing
    # NOTE: idle runtime threads may spin briefly after earlier work; far less than the second waited
    assert steps.left() > 9.5
    before, start = steps.left(), cpu_seconds()
    while cpu_seconds() - start < 0.3:
        sum(range(10000))
    assert before - steps.left() >= 0.3  # every CPU second computed is charged
