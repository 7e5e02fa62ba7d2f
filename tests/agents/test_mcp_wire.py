"""`tilescope mcp` answers every request, a malformed one with a JSON-RPC 2.0 error: the screen of
each line (`agents.jsonrpc.screen`) on its own, and the server spoken to in raw lines, as a client
that sent one would wait for its answer."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

from tilescope.agents.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, screen

NO_BATCHES = ("Invalid Request: batches are not served (MCP 2025-06-18 dropped JSON-RPC batching): send each "
              "message on its own line")  # fmt: skip

# a line -> (the code, the id and the start of the message of the error it is answered with)
MALFORMED = {
    "garbage": (PARSE_ERROR, None, "Parse error: the line is not JSON (Expecting value: line 1 column 1"),
    '{"jsonrpc": "2.0", "id": 3, "method": "ping"': (PARSE_ERROR, None, "Parse error: the line is not JSON"),
    "[]": (INVALID_REQUEST, None, "Invalid Request: an empty batch; send one JSON-RPC 2.0 message"),
    '"ping"': (INVALID_REQUEST, None, "Invalid Request: a message is a JSON object, not a string"),
    "7": (INVALID_REQUEST, None, "Invalid Request: a message is a JSON object, not a number"),
    '{"id": 7, "method": "ping"}': (INVALID_REQUEST, 7, 'Invalid Request: "jsonrpc" must be "2.0" (found missing)'),
    '{"jsonrpc": "1.0", "id": "a", "method": "ping"}': (
        INVALID_REQUEST, "a", 'Invalid Request: "jsonrpc" must be "2.0" (found "1.0")'),
    '{"jsonrpc": "2.0", "id": null, "method": "ping"}': (
        INVALID_REQUEST, None, 'Invalid Request: "id" is null; an MCP request has a string or integer id'),
    '{"jsonrpc": "2.0", "id": 2.5, "method": "ping"}': (
        INVALID_REQUEST, 2.5, 'Invalid Request: "id" must be a string or an integer (found 2.5)'),
    '{"jsonrpc": "2.0", "id": true, "method": "ping"}': (
        INVALID_REQUEST, None, 'Invalid Request: "id" must be a string or an integer (found true)'),
    '{"jsonrpc": "2.0", "id": 8, "method": 5}': (INVALID_REQUEST, 8, 'Invalid Request: "method" must be a string'),
    '{"jsonrpc": "2.0", "id": 9}': (INVALID_REQUEST, 9, 'Invalid Request: a message needs a "method"'),
    '{"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": 5}': (
        INVALID_REQUEST, 10, 'Invalid Request: "params" must be an object (found 5)'),
    '{"jsonrpc": "2.0", "id": 11, "method": "tools/list", "params": []}': (
        INVALID_PARAMS, 11, 'Invalid params: MCP takes "params" as an object of named parameters, not an array'),
    '{"jsonrpc": "2.0", "method": 1, "params": "bar"}': (INVALID_REQUEST, None, 'Invalid Request: "method" must be'),
}  # fmt: skip

UNANSWERED = [
    "",
    "   ",
    '{"jsonrpc": "2.0", "method": "notifications/whatever"}',
    '{"jsonrpc": "2.0", "id": 40, "result": {}}',
    '{"jsonrpc": "2.0", "id": 41, "error": {"code": 1, "message": "no"}}',
]


@pytest.mark.parametrize("line", MALFORMED)
def test_a_malformed_line_is_answered_with_the_error_that_says_what_is_wrong(line):
    code, request_id, message = MALFORMED[line]
    s = screen(line)
    assert not s.forward and s.reply["jsonrpc"] == "2.0" and s.reply["id"] == request_id
    assert s.reply["error"]["code"] == code and s.reply["error"]["message"].startswith(message), s.reply


@pytest.mark.parametrize("line", UNANSWERED)
def test_notifications_responses_and_blank_lines_are_never_answered(line):
    s = screen(line)
    assert s.reply is None and s.forward == ("jsonrpc" in line), s


def test_a_batch_answers_each_request_in_it_and_no_notification():
    batch = [{"jsonrpc": "2.0", "id": 5, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"},
             {"jsonrpc": "2.0", "id": "b", "method": "tools/list"}, {"foo": "boo"}]  # fmt: skip
    s = screen(json.dumps(batch))
    assert not s.forward and [(r["id"], r["error"]["code"], r["error"]["message"]) for r in s.reply] == [
        (5, INVALID_REQUEST, NO_BATCHES), ("b", INVALID_REQUEST, NO_BATCHES), (None, INVALID_REQUEST, NO_BATCHES)]
    only_notes = screen(json.dumps(batch[1:2]))
    assert only_notes.reply is None and not only_notes.forward and NO_BATCHES in only_notes.note


def test_a_malformed_response_is_logged_not_answered():
    s = screen('{"jsonrpc": "2.0", "id": null, "result": {}}')
    assert not s.forward and s.reply is None and s.note == 'a malformed response was dropped: its "id" is null, ' \
        "not a string or an integer"


def test_what_the_sdk_cannot_read_is_answered_too():
    def sdk_reads(line: str) -> None:
        raise ValueError("1 validation error\n  id: Input should be a valid integer")

    s = screen('{"jsonrpc": "2.0", "id": 4, "method": "ping"}', sdk_reads)
    assert not s.forward and s.reply == {"jsonrpc": "2.0", "id": 4, "error": {"code": INVALID_REQUEST, "message":
        "Invalid Request: the MCP SDK cannot read it (id: Input should be a valid integer)"}}  # fmt: skip
    assert screen('{"jsonrpc": "2.0", "id": 4, "method": "ping"}', lambda line: None).forward


class _Server:
    """``tilescope mcp`` as a subprocess, spoken to in raw lines."""

    def __init__(self, stderr):
        env = {k: v for k, v in os.environ.items() if k.startswith("TILESCOPE_") or k in ("PYTHONPATH", "CXX")}
        self.p = subprocess.Popen([sys.executable, "-m", "tilescope", "mcp"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=stderr, env=env)  # fmt: skip

    def send(self, line: str) -> None:
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def answer(self, timeout_s: float = 30.0):
        """The next line the server writes, as JSON; None when none comes within ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            ready, _, _ = select.select([self.p.stdout], [], [], max(0.0, end - time.monotonic()))
            if ready:
                return json.loads(self.p.stdout.readline())
        return None

    def close(self) -> int:
        self.p.stdin.close()
        return self.p.wait(30)


@pytest.mark.slow
def test_the_server_answers_every_malformed_request_and_goes_on(tmp_path):
    pytest.importorskip("mcp", reason="tilescope mcp needs the mcp SDK: pip install 'tilescope[agents]'")
    with open(tmp_path / "stderr", "w") as log:
        server = _Server(log)
        try:
            server.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}))
            assert server.answer()["result"]["serverInfo"]["name"] == "tilescope"
            server.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
            got = {}
            for line in MALFORMED:
                server.send(line)
                got[line] = server.answer()
            server.send('[{"jsonrpc": "2.0", "id": 30, "method": "ping"}, {"jsonrpc": "2.0", "method": "n"}]')
            batch = server.answer()
            for line in UNANSWERED:
                server.send(line)
            server.send('{"jsonrpc": "2.0", "id": 31, "method": "ping"}')
            after = server.answer()  # the next line is the ping's: nothing answered what came between
            server.send('{"jsonrpc": "2.0", "id": 32, "method": "no/such"}')
            unknown = server.answer()
        finally:
            rc = server.close()
    for line, (code, request_id, message) in MALFORMED.items():
        reply = got[line]
        assert reply is not None, f"no answer to {line!r}"
        assert (reply["id"], reply["error"]["code"]) == (request_id, code), (line, reply)
        assert reply["error"]["message"].startswith(message), (line, reply)
    assert batch == [{"jsonrpc": "2.0", "id": 30, "error": {"code": INVALID_REQUEST, "message": NO_BATCHES}}]
    assert after == {"jsonrpc": "2.0", "id": 31, "result": {}}
    assert unknown["id"] == 32 and unknown["error"]["code"] == -32601  # the SDK's own answer, as before
    assert rc == 0
