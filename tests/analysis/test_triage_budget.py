"""Triage's budget counts its own CPU time: waiting (a machine busy with other work) does not
use it up; computing does."""

import time

from tilescope.analysis.report import Report
from tilescope.analysis.triage.steps import Steps, cpu_seconds


def test_waiting_does_not_use_the_budget_and_computing_does():
    steps = Steps(Report("p", "w", "d", "", ""), 10.0, lambda _: None)
    time.sleep(0.3)  # what a loaded machine does to a step: wall time passes, no CPU is spent
    assert steps.left() > 9.9
    start = cpu_seconds()
    while cpu_seconds() - start < 0.3:
        sum(range(10000))
    assert steps.left() < 9.75
