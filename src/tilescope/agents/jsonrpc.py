"""What a line on ``tilescope mcp``'s wire must be before the MCP SDK reads it: one JSON-RPC 2.0
message per line. ``screen(line)`` says whether the line goes on to the SDK and, when it does not,
the error response its sender gets. The SDK drops a line it cannot read without a word, so a
client that sent one would wait for an answer forever; this module is why it never does.

Invariants:
- Every request is answered. A line the SDK would drop is answered here with a JSON-RPC 2.0 error
  object: -32700 (not JSON) or -32600 (not a request: ``jsonrpc`` not ``"2.0"``, an ``id`` that
  is null or neither a string nor an integer, a ``method`` that is not a string, ``params`` that
  are not an object) or -32602 (``params`` given as an array: MCP names its parameters). The
  error carries the request's ``id`` where it has one a client can match (a string or a number),
  else null, and its message says what is wrong and what to send instead.
- A notification (a ``method`` and no ``id``) and a response (a ``result`` or an ``error``) are
  never answered, as JSON-RPC 2.0 says; a malformed response is only logged (``Screened.note``),
  and a blank line is skipped.
- A batch (a JSON array) is not served: MCP 2025-06-18 dropped JSON-RPC batching. An empty batch
  is one -32600 error (JSON-RPC 2.0); any other is answered with an array of -32600 errors, one
  per request in it (its notifications and responses get none), so that no request in it waits.
- ``screen`` takes the SDK's own reader as ``sdk_reads`` (a function that raises on a line the SDK
  cannot read): a line it refuses that this module's checks let through is answered as -32600.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
ONE_PER_LINE = "send one JSON-RPC 2.0 message, a JSON object, per line"
NO_BATCHES = (
    "Invalid Request: batches are not served (MCP 2025-06-18 dropped JSON-RPC batching): send each message on "
    "its own line"
)


@dataclass(frozen=True)
class Screened:
    """What becomes of one line: handed on to the SDK (``forward``), answered with ``reply`` (an
    error response, or an array of them), or dropped with ``note`` for the server's log."""

    forward: bool
    reply: dict[str, Any] | list[dict[str, Any]] | None = None
    note: str = ""


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _shown(v: Any) -> str:
    return "missing" if v is _MISSING else json.dumps(v)[:60]


_MISSING = object()


def _reply_id(msg: Any) -> str | int | float | None:
    """The id to answer ``msg`` with: its own when a client can match it (a string or a number)."""
    v = msg.get("id") if isinstance(msg, dict) else None
    return v if isinstance(v, str) or (isinstance(v, int | float) and not isinstance(v, bool)) else None


def _is_response(msg: Any) -> bool:
    return isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg)


def _is_notification(msg: Any) -> bool:
    return isinstance(msg, dict) and "method" in msg and "id" not in msg


def _request_problem(msg: Any) -> tuple[int, str] | None:
    """Why ``msg`` (not a response) is not a request or notification the SDK reads, or None."""
    if not isinstance(msg, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(msg), "a number")
        return INVALID_REQUEST, f"Invalid Request: a message is a JSON object, not {kind}; {ONE_PER_LINE}"
    if msg.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, f'Invalid Request: "jsonrpc" must be "2.0" (found {_shown(msg.get("jsonrpc", _MISSING))})'
    if "method" not in msg:
        return INVALID_REQUEST, ('Invalid Request: a message needs a "method" (a request, or a notification without '
                                 'an "id"), or a "result" or an "error" (a response)')  # fmt: skip
    if not isinstance(msg["method"], str):
        return INVALID_REQUEST, f'Invalid Request: "method" must be a string (found {_shown(msg["method"])})'
    if "id" in msg:
        rid = msg["id"]
        if rid is None:
            return INVALID_REQUEST, ('Invalid Request: "id" is null; an MCP request has a string or integer id, and '
                                     'a notification has no "id" member')  # fmt: skip
        if not (isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))):
            return INVALID_REQUEST, f'Invalid Request: "id" must be a string or an integer (found {_shown(rid)})'
    params = msg.get("params")
    if isinstance(params, list):
        return INVALID_PARAMS, 'Invalid params: MCP takes "params" as an object of named parameters, not an array'
    if params is not None and not isinstance(params, dict):
        return INVALID_REQUEST, f'Invalid Request: "params" must be an object (found {_shown(params)})'
    return None


def _response_problem(msg: dict[str, Any]) -> str | None:
    rid = msg.get("id")
    if msg.get("jsonrpc") != "2.0":
        return f'"jsonrpc" is {_shown(msg.get("jsonrpc", _MISSING))}, not "2.0"'
    if not (isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))):
        return f'its "id" is {_shown(msg.get("id", _MISSING))}, not a string or an integer'
    if "result" in msg and "error" in msg:
        return 'it has both a "result" and an "error"'
    return None


def _batch(items: list[Any]) -> Screened:
    if not items:
        return Screened(False, error(None, INVALID_REQUEST, f"Invalid Request: an empty batch; {ONE_PER_LINE}"))
    replies = [error(_reply_id(m), INVALID_REQUEST, NO_BATCHES) for m in items
               if not _is_notification(m) and not _is_response(m)]  # fmt: skip
    if not replies:
        return Screened(False, note=f"a batch of {len(items)} notification(s) or response(s) was dropped: {NO_BATCHES}")
    return Screened(False, replies)


def screen(line: str, sdk_reads: Callable[[str], Any] | None = None) -> Screened:
    """What becomes of ``line`` (see the module docstring); ``sdk_reads`` is the SDK's reader."""
    if not line.strip():
        return Screened(False)
    try:
        msg = json.loads(line)
    except ValueError as e:
        return Screened(False, error(None, PARSE_ERROR, f"Parse error: the line is not JSON ({e}); {ONE_PER_LINE}"))
    if isinstance(msg, list):
        return _batch(msg)
    if _is_response(msg):
        why = _response_problem(msg)
        return Screened(True) if why is None else Screened(False, note=f"a malformed response was dropped: {why}")
    problem = _request_problem(msg)
    if problem is None and sdk_reads is not None:
        try:
            sdk_reads(line)
        except Exception as e:  # noqa: BLE001 - whatever the SDK refuses is answered, never dropped
            said = [x.strip() for x in str(e).splitlines() if x.strip()]
            problem = INVALID_REQUEST, f"Invalid Request: the MCP SDK cannot read it ({said[-1] if said else repr(e)})"
    if problem is None:
        return Screened(True)
    # NOTE: an invalid notification is an invalid request too (JSON-RPC 2.0): answered, with id null
    return Screened(False, error(_reply_id(msg), *problem))


__all__ = ["INVALID_PARAMS", "INVALID_REQUEST", "PARSE_ERROR", "Screened", "error", "screen"]
