"""What a build's sim binaries were compiled for, and the check that they can run here.

Invariants: a build records ``target`` (the machine, the host CPU's flags and the ``-march`` value
of TILESCOPE_MARCH it compiled with) in ``RUNTIME_CONFIG``; running it on another arch, or on a CPU that lacks one of those flags, is a
``ConfigError`` that names the missing flags and says what to do, never a SIGILL.
"""

from __future__ import annotations

import platform as _platform
from pathlib import Path
from typing import Any

from tilescope import knobs
from tilescope.errors import ConfigError
from tilescope.toolchain import cache


def host_target() -> dict[str, Any]:
    """What the sim binaries are compiled for: the machine, its CPU flags and the ``-march`` value."""
    return {"arch": _platform.machine(), "cpu_flags": cache.cpu_features().split(), "march": knobs.env_setting("march")}


def check_target(work_dir: Path, recorded: dict[str, Any] | None, platform: str) -> None:
    """Refuse to run a build on a platform or CPU it was not compiled for, saying what to do."""
    if recorded is None:
        return
    here = host_target()
    if recorded.get("arch") != here["arch"]:
        raise ConfigError(
            f"{work_dir} was compiled for {recorded.get('arch')} but this machine is {here['arch']}: its binaries "
            f"cannot run here; compile the program again, or run it with platform='interp'"
        )
    missing = sorted(set(recorded.get("cpu_flags", ())) - set(here["cpu_flags"]))
    if missing and platform == "sim":
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ConfigError(
            f"{work_dir} was compiled (with -march={recorded.get('march', 'native')}) on a CPU with {shown}, which this CPU lacks: its "
            "kernels may crash with SIGILL here; compile the program again on this machine, or run it with "
            "platform='interp'"
        )
