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


def test_an_undecided_triage_blames_the_budget_only_when_it_ran_out():
    from tilescope.analysis.triage.steps import NO_BUDGET

    steps = Steps(Report("p", "w", "d", "", ""), 1000.0, lambda _: None)
    steps.rep.limitations.append("localize: the sim run fails rather than answering wrong")
    steps.undecided()
    assert steps.rep.category == "unknown"
    assert "budget" not in steps.rep.summary
    assert steps.rep.summary.endswith("what could not run: localize: the sim run fails rather than answering wrong")
    spent = Steps(Report("p", "w", "d", "", ""), 1000.0, lambda _: None)
    spent.rep.limitations.append(f"{NO_BUDGET} for the access audit")
    spent.undecided()
    assert (spent.rep.category, spent.rep.summary) == ("unknown", "triage could not name the fault within its budget")
    decided = Steps(Report("p", "w", "d", "race", "two tasks"), 1000.0, lambda _: None)
    decided.undecided()
    assert (decided.rep.category, decided.rep.summary) == ("race", "two tasks")
