"""``tilescope mcp``: the tools of ``agents.tools`` served to a coding agent over the Model Context
Protocol on standard input and output, with the official ``mcp`` SDK (2.x,
``pip install 'tilescope[agents]'``). docs/agents.md says how to register it with a client.

Invariants:
- Standard output carries JSON-RPC and nothing else. Before serving, the wire moves to private
  descriptors (not inherited by child processes); fd 1 and ``sys.stdout`` then point at stderr and
  fd 0 at the null device, so whatever tilescope, the C++ runtime, g++ or a child process prints
  goes to stderr (the client's log), and nothing reads the client's requests but the server.
  Both descriptors are restored when serving ends.
- A tool call never ends the server: it answers a result, or a tool error (``is_error``) whose text
  names the tool, the argument at fault and what to do (``agents.tools.answer``); its structured
  content is the tool's JSON (for an error: ``tool``, ``error``, ``argument``, ``message``).
- Tool calls run on worker threads, so the server keeps answering (a listing, a query, a ping)
  while a triage runs for minutes.
- Every request gets an answer: each line read is screened (``agents.jsonrpc.screen``) before the
  SDK sees it, and one it would drop without a word (not JSON, a batch, a request with a bad
  ``jsonrpc``, ``id``, ``method`` or ``params``) is answered with a JSON-RPC 2.0 error. The SDK's
  responses and those errors share one writer, a whole line at a time.
- Without the SDK, ``tilescope mcp`` says so in one line naming the fix, and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from tilescope._logging import configure
from tilescope._version import __version__
from tilescope.agents.jsonrpc import screen
from tilescope.agents.tools import TOOLS, Tool, answer, unknown_tool

log = logging.getLogger("tilescope")

INSTALL = "pip install 'tilescope[agents]'"
DESCRIPTION = (
    "Serve tilescope's debugging tools (triage, propose_fix, localize, replay, dump_records, dump_values, deps, "
    "trace) to a coding agent over the Model Context Protocol on standard input and output. An MCP client starts "
    f"it as the command `tilescope mcp` (docs/agents.md). It needs the mcp SDK: {INSTALL}"
)
INSTRUCTIONS = (
    "tilescope compiles tile kernels to C++ and runs them as a task graph; these tools debug a build directory "
    "(build_output/_jit_<fn>_<stamp>) on the data a run saved (--save-data). Pass absolute paths. Start with "
    "triage: it names the category and the culprit (task, kernel, op, DSL line, C++ line). propose_fix also "
    "proposes an edit of the DSL source, verified on a copy (the user's file is never changed). localize "
    "explains wrong values; replay re-runs the build or one saved task; dump_records/dump_values, deps and trace "
    "read what an instrumented run wrote (--dump-tensor, --enable-dep-gen, --trace)."
)


def sdk_problem() -> str | None:
    """Why the MCP SDK cannot serve (not installed, or not 2.x), or None."""
    try:
        import mcp.server.lowlevel  # noqa: F401 - only whether it imports
        import mcp.server.stdio  # noqa: F401
    except ImportError as e:
        return f"the Model Context Protocol SDK (the mcp package) cannot be imported ({e})"
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("mcp")
    except PackageNotFoundError:
        return None  # NOTE: importable without metadata (a vendored copy): let it try
    if not found.split(".")[0].isdigit() or int(found.split(".")[0]) != 2:
        return f"mcp {found} is installed; tilescope mcp needs mcp 2.x"
    return None


@contextlib.contextmanager
def stdio_wire() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The process's standard input and output as the protocol's private wire (read, write); while
    it is held, fd 0 reads the null device and fd 1 and ``sys.stdout`` write to stderr."""
    sys.stdout.flush()
    saved_in, saved_out, saved_sys = os.dup(0), os.dup(1), sys.stdout
    wire_in, wire_out = os.dup(0), os.dup(1)  # NOTE: new descriptors are not inheritable
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        with os.fdopen(wire_in, "rb") as r, os.fdopen(wire_out, "wb") as w:
            yield r, w
    finally:
        sys.stdout = saved_sys
        for fd, saved in ((0, saved_in), (1, saved_out)):
            os.dup2(saved, fd)
            os.close(saved)
        os.close(null)


class _Wire:
    """The protocol's output, written a whole line at a time by one writer at a time: the SDK's
    messages and the answers to the lines it never sees."""

    def __init__(self, file: Any):
        import anyio

        self._file, self._lock = file, anyio.Lock()

    async def write(self, text: str) -> None:
        async with self._lock:
            await self._file.write(text)
            await self._file.flush()

    async def flush(self) -> None:
        """Nothing left to flush: ``write`` flushed its line."""


class _Screened:
    """The protocol's input as the SDK reads it: the lines ``screen`` hands on; every other line
    is answered on ``wire`` here (or logged, where JSON-RPC wants no answer)."""

    def __init__(self, lines: Any, wire: _Wire, sdk_reads: Any):
        self._lines, self._wire, self._sdk_reads = lines, wire, sdk_reads

    def __aiter__(self) -> Any:
        return self._screened()

    async def _screened(self) -> Any:
        async for line in self._lines:
            s = screen(line, self._sdk_reads)
            if s.reply is not None:
                await self._wire.write(json.dumps(s.reply, separators=(",", ":")) + "\n")
            if s.note:
                log.warning("[mcp] %s", s.note)
            if s.forward:
                yield line


def serve(tools: Sequence[Tool] = TOOLS) -> None:
    """Serve ``tools`` over standard input and output until the client closes its end."""
    import anyio

    with stdio_wire() as (wire_in, wire_out):
        anyio.run(_serve, tuple(tools), wire_in, wire_out)


async def _serve(tools: tuple[Tool, ...], wire_in: BinaryIO, wire_out: BinaryIO) -> None:
    import anyio
    import anyio.to_thread
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    by_name = {t.name: t for t in tools}
    listing = [
        types.Tool(name=t.name, description=t.description, input_schema=t.input_schema(),
                   annotations=types.ToolAnnotations(read_only_hint=t.read_only, destructive_hint=False))
        for t in tools
    ]  # fmt: skip

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            ok, data = False, unknown_tool(params.name, by_name)
        else:
            ok, data = await anyio.to_thread.run_sync(answer, tool, params.arguments, abandon_on_cancel=True)
        text = json.dumps(data, indent=1) if ok else f"tilescope {data['tool']}: {data['message']}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=data,
                                    is_error=not ok)  # fmt: skip

    server = Server("tilescope", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                    on_call_tool=call_tool)  # fmt: skip
    stdout = _Wire(anyio.wrap_file(io.TextIOWrapper(wire_out, encoding="utf-8", write_through=True)))
    lines = anyio.wrap_file(io.TextIOWrapper(wire_in, encoding="utf-8", errors="replace"))
    stdin = _Screened(lines, stdout, lambda line: types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    async with stdio_server(stdin, stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
        await server.run(read_stream, write_stream, server.create_initialization_options())


def add_mcp_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``tilescope mcp``'s arguments (none: the client starts it and speaks on its stdin/stdout)."""
    return p


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope mcp``: serve until the client closes the connection (0); 2 without the SDK."""
    problem = sdk_problem()
    if problem is not None:
        print(f"tilescope mcp: {problem}; install it with: {INSTALL}", file=sys.stderr, flush=True)
        return 2
    configure("warn")
    try:
        serve()
    except KeyboardInterrupt:
        return 130
    return 0


__all__ = ["DESCRIPTION", "INSTALL", "add_mcp_args", "run_cli", "sdk_problem", "serve", "stdio_wire"]
