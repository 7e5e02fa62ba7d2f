"""The session shown in docs/agents.md, driven through the MCP SDK's own client: a program with a
planted bug (a store loop that stops one chunk short) is compiled and its data saved, then
`tilescope mcp` is started as a client starts it, and asked to list its tools, triage the build,
propose a fix, and answer a call with a bad argument.

    python docs/agents_transcript.py        # needs: pip install 'tilescope[agents]'
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import anyio
import torch
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import tilescope as ts
from tilescope.analysis.data import save_snapshot

R, W = 64, 512


@ts.kernel
def scale_rows(x: ts.Tensor[[R, W], ts.f32], y: ts.Out[[R, W], ts.f32]):
    for h in ts.range(0, W - 64, 64):  # the planted bug: one chunk short
        t = ts.load(x, [0, h], [R, 64])
        ts.store(y, [0, h], t * 2.0)


@ts.kernel
def add_one(y: ts.Tensor[[R, W], ts.f32], z: ts.Out[[R, W], ts.f32]):
    for h in ts.range(0, W, 128):
        ts.store(z, [0, h], ts.load(y, [0, h], [R, 128]) + 1.0)


@ts.jit
def scale_then_add(x: ts.Tensor[[2 * R, W], ts.f32], z: ts.Out[[2 * R, W], ts.f32]):
    y = ts.create_tensor([2 * R, W], ts.f32)
    for r in ts.range(0, 2 * R, R):
        scale_rows(x[r : r + R, :], y[r : r + R, :])
    for r in ts.range(0, 2 * R, R):
        add_one(y[r : r + R, :], z[r : r + R, :])


def failing_build(base: str) -> str:
    """The program compiled under ``base``, with its inputs and golden saved (what --save-data writes)."""
    prog = scale_then_add.compile(build_dir=base)
    x = torch.randn(2 * R, W, generator=torch.Generator().manual_seed(0))
    inputs = {"x": x, "z": torch.zeros(2 * R, W)}
    save_snapshot(prog.work_dir / "data", list(prog.args), inputs, {"z": x * 2 + 1}, {"rtol": 1e-5, "atol": 1e-5})
    return str(prog.work_dir)


def show(direction: str, what: str, data=None) -> None:
    print(f"{direction} {what}")
    if data is not None:
        print(json.dumps(data, indent=1))
    print()


async def session(build: str) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith("TILESCOPE_") or k == "PYTHONPATH"}
    server = StdioServerParameters(command=sys.executable, args=["-m", "tilescope", "mcp"], env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
        init = await client.initialize()
        show("<-", f"initialize: {init.server_info.name} {init.server_info.version}")
        tools = (await client.list_tools()).tools
        show("<-", "tools/list", [{"name": t.name, "arguments": {
            n: p["type"] + ("" if n in t.input_schema["required"] else "?")
            for n, p in t.input_schema["properties"].items()}} for t in tools])  # fmt: skip
        for name, args in [("triage", {"build_dir": build}), ("propose_fix", {"build_dir": build}),
                           ("triage", {"build_dir": build, "budget": "a minute"})]:  # fmt: skip
            show("->", f"tools/call {name} {json.dumps(args)}")
            result = await client.call_tool(name, args)
            if result.is_error:
                show("<-", f"error: {result.content[0].text}", result.structured_content)
            else:
                show("<-", "result (structured content)", result.structured_content)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="tilescope_agents_") as base:
        anyio.run(session, failing_build(base))
