"""The Ray engine of ``tilescope sweep``: each case a Ray task needing ``--case-cpus`` CPUs, run by
``case_run.run_case`` on whichever worker Ray picks, its files brought back to the driver's
``--out``.

Invariants:
- Without ``--ray-address`` a local Ray is started for the sweep, bound to the loopback
  (127.0.0.1, no dashboard) and shut down after it; a cluster is used only when its address is
  given (``auto`` for the one ``ray start`` made on this machine, or ``ray://host:port``).
- Files come back through the object store: a case runs into a temporary folder of its worker,
  and its folder (its output, its failure's builds with their data and its triage report; only
  the output of a passing case) returns as one tar archive that the driver unpacks into
  ``OUT/cases/<id>/``. With ``--ray-shared`` the workers see ``--out`` at the same path (a shared
  filesystem) and write there directly.
- A worker that dies while running a case, a case Ray cannot run, a cluster that goes away: the
  case is an ``error`` saying so, and the sweep goes on with the others (or records what is left
  as ``error`` when the cluster is gone). Ray never retries a case (a retried case would run twice).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tilescope.errors import TilescopeError
from tilescope.harness.sweep.case_run import case_dir, run_case
from tilescope.harness.sweep.grid import Case

INSTALL = "pip install 'tilescope[ray]' (Ray 2.60), or use --engine local"


class RayUnavailable(TilescopeError):
    """Ray is not installed, or its cluster cannot be reached."""


# NOTE: on Linux Ray takes a node's address to be the one other machines reach it by, even when
# told 127.0.0.1; with this off, every process of a local Ray binds and connects on the loopback
_LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _ray():
    try:
        import ray
    except ImportError:
        raise RayUnavailable(f"--engine ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[tuple[Any, list[str]]]:
    """Ray started on the loopback for the ``with`` block (``address`` None), or connected to the
    cluster ``address`` names; yields the ``ray`` module and the addresses of the cluster's nodes.

    Raises:
        RayUnavailable: Ray is not installed, or the cluster cannot be started or reached.
    """
    if address:
        _reachable(address)
    before = os.environ.get(_LOOPBACK_ONLY)
    if not address:
        os.environ[_LOOPBACK_ONLY] = "0"  # NOTE: read by Ray when it is imported here and in every process it starts
    ray = _ray()
    constants = ray._private.ray_constants
    cluster = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = bool(address)  # NOTE: this process may have imported Ray before
    try:
        try:
            if address:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            else:
                ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR")  # fmt: skip
        except Exception as e:  # noqa: BLE001 - whatever Ray raises for a cluster it cannot reach
            where = f"the Ray cluster at {address}" if address else "a local Ray"
            raise RayUnavailable(f"cannot start or reach {where}: {type(e).__name__}: {e}") from None
        try:
            yield ray, sorted({n.get("NodeManagerAddress", "?") for n in ray.nodes()})
        finally:
            ray.shutdown()
    finally:
        constants.ENABLE_RAY_CLUSTER = cluster
        if before is None:
            os.environ.pop(_LOOPBACK_ONLY, None)
        else:
            os.environ[_LOOPBACK_ONLY] = before


def _reachable(address: str, wait_s: float = 10.0) -> None:
    """RayUnavailable when ``address`` is ``host:port`` and nothing answers there: ``ray.init``
    would retry for minutes, deaf to Ctrl-C."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # NOTE: Ray's own message names what it cannot parse
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=wait_s).close()
    except OSError as e:
        raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {e.strerror or e} (waited {wait_s:g} s): "
                             "check the head's address and port (6379 by default), or use --engine local") from None


def run_in_session(ray: Any, run: list[Case], out: Path, timeout: float | None, triage: bool, shared: bool,
                   case_cpus: float, cwd: str, ended: Callable[[Case, dict[str, Any]], None]) -> bool:  # fmt: skip
    """Run ``run`` as Ray tasks of the session ``ray`` (``ray_session``), calling ``ended(case,
    record)`` as each ends; whether it was interrupted (Ctrl-C)."""
    remote = ray.remote(num_cpus=case_cpus, max_retries=0)(_case_on_worker)
    # NOTE: absolute: a worker of a cluster runs in the folder its `ray start` ran in
    refs = {remote.remote(c, str(Path(out).resolve()) if shared else None, timeout, triage, cwd): c for c in run}
    return _collect(ray, refs, out, ended)


def _collect(ray: Any, refs: dict[Any, Case], out: Path, ended: Callable[[Case, dict[str, Any]], None]) -> bool:
    try:
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1, timeout=1.0)
            for ref in done:
                case = refs.pop(ref)
                ended(case, _record(ray, ref, case, out))
                if _cluster_gone(ray):
                    for left in refs.values():
                        ended(left, _error(left, "the Ray cluster went away before the case ran"))
                    return False
        return False
    except KeyboardInterrupt:
        for ref, case in refs.items():
            ray.cancel(ref, force=True)
            ended(case, {**_error(case, "the sweep was stopped while it ran"), "status": "interrupted"})
        return True


def _record(ray: Any, ref: Any, case: Case, out: Path) -> dict[str, Any]:
    """The case's record, its files unpacked into ``out``; an ``error`` naming what Ray reported."""
    try:
        record, archive = ray.get(ref)
    except ray.exceptions.WorkerCrashedError:
        return _error(case, "the Ray worker running it died (its process was killed or crashed)")
    except ray.exceptions.RayTaskError as e:
        return _error(case, f"the case failed on its Ray worker: {str(e).strip().splitlines()[-1]}")
    except ray.exceptions.RayError as e:
        return _error(case, f"Ray could not run it: {type(e).__name__}: {str(e).strip().splitlines()[0]}")
    if archive is not None:
        folder = case_dir(out, case)
        shutil.rmtree(folder, ignore_errors=True)  # NOTE: what an interrupted earlier run of this case left
        folder.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                try:  # NOTE: the "data" filter refuses links out of the folder, devices and FIFOs
                    tar.extract(member, folder, filter="data")
                except (tarfile.TarError, OSError) as e:
                    record.setdefault("files_left_out", []).append(f"{member.name}: {e}")
    return record


def _cluster_gone(ray: Any) -> bool:
    try:
        return not any(n.get("Alive") for n in ray.nodes())
    except Exception:  # noqa: BLE001 - a cluster that cannot answer is gone
        return True


def _error(case: Case, why: str) -> dict[str, Any]:
    return {"id": case.id, "values": case.values, "argv": list(case.argv), "status": "error", "why": why,
            "log": "", "builds": [], "triage": None, "seconds": 0.0}  # fmt: skip


def _case_on_worker(case: Case, shared_out: str | None, timeout: float | None, triage: bool,
                    cwd: str) -> tuple[dict[str, Any], bytes | None]:  # fmt: skip
    """On a Ray worker: run the case (into ``shared_out``, or a temporary folder whose case files
    return as a tar archive: a passing case's output only)."""
    here = cwd if Path(cwd).is_dir() else None
    if shared_out is not None:
        return run_case(case, shared_out, timeout, triage, here), None
    with tempfile.TemporaryDirectory(prefix="tilescope-sweep-") as tmp:
        record = run_case(case, tmp, timeout, triage, here)
        folder = case_dir(Path(tmp), case)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            if record["status"] == "pass":
                tar.add(folder / "output.log", arcname="output.log")
                record["builds"] = []  # NOTE: a passing case's builds are not brought back: only failures need theirs
            else:
                for p in sorted(folder.iterdir()):
                    tar.add(p, arcname=p.name)
        return record, buf.getvalue()
