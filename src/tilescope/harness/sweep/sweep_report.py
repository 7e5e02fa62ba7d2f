"""What a sweep writes in ``--out``: ``sweep.json`` (the sweep and one record per case, rewritten
atomically as each case ends, so an interrupted sweep keeps what finished) and ``sweep.html``
(one offline page: the cases as a table to sort and filter by status, category and kernel, each
failure linking its triage report and its output).

Invariants:
- ``sweep.json``'s ``cases`` are in case order; ``summary`` counts them by status.
- The page needs no network and no server: the data is inlined, links are relative to ``--out``.
"""

from __future__ import annotations

import fcntl
import html
import json
import os
from pathlib import Path
from typing import Any

from tilescope.build.paths import atomic_write

SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"


class Claimed:
    """``out`` made (if missing) and held for one run: a second run into the same folder, by this
    process or another, is refused while it is held (a lock on the folder itself, released when
    the process ends however it ends)."""

    def __init__(self, out: Path):
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {out} is not a folder: choose a new folder (nothing there is overwritten)")
        out.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise ValueError(f"another run is writing into --out {out}: wait for it to end, or choose another "
                             "--out") from None  # fmt: skip

    def release(self) -> None:
        """Let another run write into the folder."""
        os.close(self.fd)


def summary(records: list[dict[str, Any]], total: int) -> dict[str, int]:
    """How many cases ended each way, and how many have no record yet (``pending``)."""
    out: dict[str, int] = {}
    for r in records:
        out[r["status"]] = out.get(r["status"], 0) + 1
    out["pending"] = total - len(records)
    return out


def write(out: Path, meta: dict[str, Any], records: dict[str, dict[str, Any]], order: list[str]) -> None:
    """Rewrite ``sweep.json`` and ``sweep.html`` from ``records`` (by case id) in ``order``."""
    done = [records[i] for i in order if i in records]
    data = {**meta, "summary": summary(done, len(order)), "cases": done}
    atomic_write(out / SWEEP_JSON, json.dumps(data, indent=1) + "\n")
    atomic_write(out / SWEEP_HTML, page(data))


def load(out: Path) -> dict[str, Any] | None:
    """The ``sweep.json`` of ``out``; None when there is none. ValueError for one that is not a sweep's."""
    path = out / SWEEP_JSON
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ValueError(f"{path} is not a sweep's record (no 'cases' list)")
    return data


def page(data: dict[str, Any]) -> str:
    """The offline HTML table of a sweep."""
    rows = []
    for r in data["cases"]:
        t = r.get("triage") or {}
        links = [f'<a href="{html.escape(r["log"])}">output</a>'] if r.get("log") else []
        if t.get("report"):
            links.append(f'<a href="{html.escape(t["report"])}">triage</a>')
        culprit = " ".join(str(x) for x in (t.get("op"), t.get("line")) if x) or (t.get("why") or "")
        cells = [r.get("id", "?"), " ".join(f"{k}={v}" for k, v in (r.get("values") or {}).items()), r.get("status", "?"),
                 f'{r.get("seconds", 0):.1f}', t.get("category") or "", t.get("kernel") or "", culprit]  # fmt: skip
        tds = "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + f"<td>{' '.join(links)}</td>"
        rows.append(f'<tr class="{html.escape(str(r.get("status", "")))}">{tds}</tr>')
    counts = ", ".join(f"{n} {k}" for k, n in data["summary"].items() if n)
    head = "".join(f'<th onclick="sortBy({i})">{h}</th>' for i, h in enumerate(
        ["case", "values", "status", "seconds", "category", "kernel", "culprit", "files"]))  # fmt: skip
    command = html.escape(" ".join(data.get("command", [])))
    return _PAGE.format(title=html.escape(f"sweep: {counts}"), command=command, head=head, rows="\n".join(rows))


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; font-size: 13px; }} th {{ cursor: pointer; background: #eee; }}
tr.fail td {{ background: #fdd; }} tr.error td, tr.timeout td, tr.interrupted td {{ background: #fec; }}
</style></head><body>
<h2>{title}</h2><p><code>{command}</code></p>
<p>filter: <input id="q" placeholder="status, category, kernel or any text" size="40" oninput="filt()"></p>
<table id="t"><thead><tr>{head}</tr></thead><tbody>
{rows}
</tbody></table>
<script>
function filt() {{
  const q = document.getElementById("q").value.toLowerCase();
  for (const tr of document.querySelectorAll("#t tbody tr"))
    tr.style.display = tr.textContent.toLowerCase().includes(q) ? "" : "none";
}}
let dir = 1;
function sortBy(i) {{
  const body = document.querySelector("#t tbody");
  const rows = Array.from(body.rows);
  dir = -dir;
  rows.sort((a, b) => {{
    const x = a.cells[i].textContent, y = b.cells[i].textContent;
    const nx = parseFloat(x), ny = parseFloat(y);
    return dir * (isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny);
  }});
  rows.forEach(r => body.appendChild(r));
}}
</script></body></html>
"""
