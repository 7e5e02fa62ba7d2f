"""What the analyses share with their commands: progress lines on a terminal, and the argparse
types of their numbers (a budget in seconds, a tolerance)."""

from __future__ import annotations

import argparse
import os
import sys

from tilescope.analysis.compare import tolerance_problem


def seconds_arg(text: str) -> float:
    """``--budget``'s type: a finite number of seconds > 0, else an argparse error saying so."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds > 0")
    return value


def tolerance_arg(text: str) -> float:
    """``--rtol``/``--atol``'s type: a finite number >= 0, else an argparse error saying so."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 1e-5)") from None
    if tolerance_problem("tolerance", value) is not None:
        raise argparse.ArgumentTypeError(f"{text}: expected a finite number >= 0")
    return value


class Progress:
    """What a long-running tool (triage, localize, shuffled runs) is doing, one line per step on
    stderr when it is a terminal; nothing otherwise, or in CI (``CI`` set), so logs stay quiet."""

    def __init__(self, tool: str, enabled: bool | None = None):
        self.tool = tool
        self.enabled = sys.stderr.isatty() and not os.environ.get("CI") if enabled is None else enabled

    def __call__(self, text: str) -> None:
        """Say ``text`` (a step starting, or how far it is), if enabled."""
        if self.enabled:
            print(f"[{self.tool}] {text}", file=sys.stderr, flush=True)
