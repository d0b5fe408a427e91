"""Median ``tools/call`` latency: through the gateway, through a null proxy, and direct.

All three in the same run, against the same upstream (the toy stdio server of the
tests, tool ``echo``), with the official ``mcp`` client SDK:

* direct: client → upstream over stdio;
* null proxy: client → (in-memory) a pass-through MCP server built with the same
  SDK and the same :class:`sealbox.gateway.upstream.Upstream` → upstream over stdio;
  nothing is decided or recorded;
* gateway: client → (in-memory) the Sealbox gateway → upstream; every call is
  decided and recorded (``tool.call`` + ``policy.decision`` fsync'd before
  forwarding, ``tool.result`` after) in a SQLite store on local disk.

Target (issue 6): gateway ≤ 1.2× the null proxy. Figures are printed, never asserted.
Usage: ``python bench/bench_gateway.py [--quick] [--concurrent K]`` (K calls in flight at once on
one session; default 1, sequential).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import print_machine_once, print_table, report  # noqa: E402

TOY = str(HERE.parent / "tests" / "gateway" / "servers" / "toy_server.py")


CONCURRENCY = 1  # calls in flight at once on the session (``--concurrent K``)


async def _timed_calls(session, name: str, n: int) -> list[float]:
    out: list[float] = []

    async def worker(k: int) -> None:
        for i in range(k, n, CONCURRENCY):
            t0 = time.perf_counter()
            await session.call_tool(name, {"text": f"hello {i}"})
            out.append((time.perf_counter() - t0) * 1000)

    async with anyio.create_task_group() as tg:
        for k in range(CONCURRENCY):
            tg.start_soon(worker, k)
    return out


async def direct(n: int) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[TOY])
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        await _timed_calls(s, "echo", 20)
        return await _timed_calls(s, "echo", n)


async def _through(server, init_options, prepare, n: int) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    async with anyio.create_task_group() as tg:
        await tg.start(prepare)
        async with create_client_server_memory_streams() as (client, srv):
            tg.start_soon(server.run, srv[0], srv[1], init_options)
            async with ClientSession(client[0], client[1]) as s:
                await s.initialize()
                await _timed_calls(s, "toy__echo", 20)
                samples = await _timed_calls(s, "toy__echo", n)
        tg.cancel_scope.cancel()
    return samples


def _config(tmp: Path):
    from sealbox.gateway import parse_config

    return parse_config(f"""
version: 1
store: {json.dumps(str(tmp / 'store'))}
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(TOY)}]
""", base=tmp)


async def null_proxy(n: int, tmp: Path) -> list[float]:
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    from sealbox.gateway.upstream import Upstream

    cfg = _config(tmp)
    up = Upstream(cfg.upstreams[0], cfg.limits)

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[t.model_copy(update={"name": "toy__" + t.name}) for t in up.tools.values()])

    async def call_tool(ctx, params):
        return await up.call(params.name.partition("__")[2], params.arguments)

    server = Server("null-proxy", on_list_tools=list_tools, on_call_tool=call_tool)

    async def prepare(task_status):
        async with anyio.create_task_group() as tg:
            tg.start_soon(up.run)
            await up.wait_until(lambda u: u.state == "ready")
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                up.stop()

    return await _through(server, server.create_initialization_options(), prepare, n)


async def gateway(n: int, tmp: Path) -> list[float]:
    import sealbox
    from sealbox.gateway import Gateway

    store = sealbox.init_store(tmp / "store")
    try:
        gw = Gateway(_config(tmp), store=store)
        return await _through(gw.server, gw.initialization_options(), gw.run_upstreams, n)
    finally:
        store.close()


async def main(quick: bool) -> None:
    n = 100 if quick else 500
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        d = await direct(n)
        p = await null_proxy(n, Path(a))
        g = await gateway(n, Path(b))
    md, mp, mg = (statistics.median(x) for x in (d, p, g))
    if CONCURRENCY > 1:
        print(f"{CONCURRENCY} calls in flight at once on one session")
    print(f"tools/call median over {n} calls: direct {md:.3f} ms, null proxy {mp:.3f} ms, gateway {mg:.3f} ms")
    print(f"  gateway adds {mg - mp:.3f} ms over the null proxy and {mg - md:.3f} ms over a direct call")
    report("gateway vs null proxy (tools/call)", g, p, "ms", 1.2)
    report("gateway vs direct (tools/call)", g, d, "ms", None)
    report("null proxy vs direct (tools/call)", p, d, "ms", None)


if __name__ == "__main__":
    if "--concurrent" in sys.argv:
        CONCURRENCY = int(sys.argv[sys.argv.index("--concurrent") + 1])
    print_machine_once()
    anyio.run(main, "--quick" in sys.argv)
    print_table("Gateway")
