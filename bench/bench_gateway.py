"""Median ``tools/call`` latency: through the gateway, through a null proxy, and direct.

All in the same run, against the same upstream (the toy stdio server of the
tests, tool ``echo``), with the official ``mcp`` client SDK:

* direct: client → upstream over stdio;
* null proxy: client → (in-memory) a pass-through MCP server built with the same
  SDK and the same :class:`sealbox.gateway.upstream.Upstream` → upstream over stdio;
  nothing is decided or recorded;
* gateway (full): client → (in-memory) the Sealbox gateway → upstream; every call is
  decided and recorded (``tool.call`` + ``policy.decision`` committed and fsync'd
  before forwarding, ``tool.result`` after, before the answer) in a SQLite store on
  local disk, ``durability: full`` in the gateway config (the default);
* gateway (fast): the same with ``durability: fast`` in the gateway config (the store's
  commits are not fsync'd: a power cut can lose the last calls, a process crash cannot).

The four sessions are open at once (each with its own upstream process) and
measured interleaved, in rounds of a few dozen calls each, so that load from other
processes on the machine falls on all of them alike. Each figure is the median of
every sample of that configuration.

With ``--split``, a fifth session is measured with them: the gateway (fast) with its recorder's
call replaced by a plain ``await`` of the forwarding (nothing decided or recorded; not a
configuration anyone can run, a diagnostic): what it adds over the null proxy is the gateway's
own work (protocol checks, run lookup, schema check, shielding, bookkeeping), and the rest of
the gateway's added time is the recording.

``--handler`` measures instead, in one process and without any transport, the gateway's
``tools/call`` handler and its protocol checks (:func:`sealbox.gateway.server.check_request`)
against an upstream that answers at once: without its recording, with it (``fast``), and the null
proxy's handler. Steadier than the end-to-end figures: it is the gateway's own Python work per
call and the recorded call's, without the SDK, the pipes or the upstream process.

Target (issue 6): gateway ≤ 1.2× the null proxy. Figures are printed, never asserted.
Usage: ``python bench/bench_gateway.py [--quick] [--concurrent K] [--rounds R] [--split] [--handler]``
(K calls in flight at once on one session; default 1, sequential; R rounds, default 10).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import print_machine_once, print_table, report  # noqa: E402

TOY = str(HERE.parent / "tests" / "gateway" / "servers" / "toy_server.py")


CONCURRENCY = 1  # calls in flight at once on the session (``--concurrent K``)
ROUNDS = 10  # interleaved rounds (``--rounds R``)
SPLIT = False  # also measure the gateway without its recording (``--split``)


async def _timed_calls(session: Any, name: str, n: int) -> list[float]:
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


@contextlib.asynccontextmanager
async def direct() -> AsyncIterator[tuple[Any, str]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[TOY])
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        yield s, "echo"


@contextlib.asynccontextmanager
async def _through(server: Any, init_options: Any, prepare: Any) -> AsyncIterator[tuple[Any, str]]:
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    async with anyio.create_task_group() as tg:
        await tg.start(prepare)
        async with create_client_server_memory_streams() as (client, srv):
            tg.start_soon(server.run, srv[0], srv[1], init_options)
            async with ClientSession(client[0], client[1]) as s:
                await s.initialize()
                yield s, "toy__echo"
        tg.cancel_scope.cancel()


def _config(tmp: Path, durability: str = "full") -> Any:
    from sealbox.gateway import parse_config

    return parse_config(f"""
version: 1
store: {json.dumps(str(tmp / 'store'))}
durability: {durability}
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(TOY)}]
""", base=tmp)


@contextlib.asynccontextmanager
async def null_proxy(tmp: Path) -> AsyncIterator[tuple[Any, str]]:
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    from sealbox.gateway.upstream import Upstream

    cfg = _config(tmp)
    up = Upstream(cfg.upstreams[0], cfg.limits)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[t.model_copy(update={"name": "toy__" + t.name}) for t in up.tools.values()])

    async def call_tool(ctx: Any, params: Any) -> Any:
        return await up.call(params.name.partition("__")[2], params.arguments)

    server = Server("null-proxy", on_list_tools=list_tools, on_call_tool=call_tool)

    async def prepare(task_status: Any) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(up.run)
            await up.wait_until(lambda u: u.state == "ready")
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                up.stop()

    async with _through(server, server.create_initialization_options(), prepare) as target:
        yield target


def _without_recording(gw: Any) -> None:
    """``--split``: every run this gateway starts answers ``acall_tool`` by awaiting the forwarding
    itself (no decision, no ``tool.call`` / ``tool.result``); the rest of the gateway is unchanged."""
    start = gw.recorder.run

    async def passthrough(server: str, tool: str, arguments: Any, fn: Any, **_: Any) -> Any:
        return await fn(**arguments)

    def run(**kwargs: Any) -> Any:
        ctx = start(**kwargs)
        ctx.acall_tool = passthrough  # this run only: the other gateways of the bench record as usual
        return ctx

    gw.recorder.run = run


@contextlib.asynccontextmanager
async def gateway(tmp: Path, durability: str, record: bool = True) -> AsyncIterator[tuple[Any, str]]:
    import sealbox
    from sealbox.gateway import Gateway

    sealbox.init_store(tmp / "store").close()
    gw = Gateway(_config(tmp, durability))  # opens the store with the config's durability
    if not record:
        _without_recording(gw)
    try:
        assert gw.store.durability == durability
        async with _through(gw.server, gw.initialization_options(), gw.run_upstreams) as target:
            yield target
    finally:
        gw.store.close()


async def main(quick: bool) -> None:
    n = 200 if quick else 1000
    rounds = min(ROUNDS, n)
    per_round = -(-n // rounds)
    names = ["direct", "null proxy", "gateway (fast)", "gateway (full)"] + (["no recording"] if SPLIT else [])
    samples: dict[str, list[float]] = {k: [] for k in names}
    by_round: dict[str, list[float]] = {k: [] for k in names}
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for sub in ("proxy", "fast", "full", "bare"):
            (tmp / sub).mkdir()
        targets = {
            "direct": await stack.enter_async_context(direct()),
            "null proxy": await stack.enter_async_context(null_proxy(tmp / "proxy")),
            "gateway (fast)": await stack.enter_async_context(gateway(tmp / "fast", "fast")),
            "gateway (full)": await stack.enter_async_context(gateway(tmp / "full", "full")),
        }
        if SPLIT:
            targets["no recording"] = await stack.enter_async_context(gateway(tmp / "bare", "fast", record=False))
        for name, (session, tool) in targets.items():  # warm up: imports, caches, the run's first call
            await _timed_calls(session, tool, 30)
        for r in range(rounds):
            # rotate the order so no configuration always runs right after another
            for name in names[r % len(names):] + names[:r % len(names)]:
                session, tool = targets[name]
                got = await _timed_calls(session, tool, per_round)
                samples[name] += got
                by_round[name].append(statistics.median(got))
    md, mp, mf, mF = (statistics.median(samples[k]) for k in names[:4])
    total = len(samples["direct"])
    if CONCURRENCY > 1:
        print(f"{CONCURRENCY} calls in flight at once on one session")
    print(f"tools/call median over {total} calls each ({rounds} interleaved rounds of {per_round}):")
    print(f"  direct {md:.3f} ms, null proxy {mp:.3f} ms, gateway (fast) {mf:.3f} ms, gateway (full) {mF:.3f} ms")
    for label, mg in (("fast", mf), ("full", mF)):
        print(f"  gateway ({label}) adds {mg - mp:.3f} ms over the null proxy and {mg - md:.3f} ms over a direct call")
    if SPLIT:
        mb = statistics.median(samples["no recording"])
        print(f"  gateway without its recording (--split) {mb:.3f} ms: its own work adds {mb - mp:.3f} ms over the "
              f"null proxy; the recording adds {mf - mb:.3f} ms (fast) and {mF - mb:.3f} ms (full) on top")
    print("  per-round medians (ms):")
    for name in names:
        print(f"    {name:<15} " + " ".join(f"{x:.2f}" for x in by_round[name]))
    note_fast = "store durability='fast': commits not fsync'd (a power cut may lose the last calls)"
    note_full = "store durability='full' (default): the tool.call + policy.decision commit is fsync'd before forwarding"
    report("gateway (fast) vs null proxy (tools/call)", samples["gateway (fast)"], samples["null proxy"], "ms", 1.2,
           note_fast)
    report("gateway (full) vs null proxy (tools/call)", samples["gateway (full)"], samples["null proxy"], "ms", 1.2,
           note_full)
    report("gateway (fast) vs direct (tools/call)", samples["gateway (fast)"], samples["direct"], "ms", None)
    report("gateway (full) vs direct (tools/call)", samples["gateway (full)"], samples["direct"], "ms", None)
    report("null proxy vs direct (tools/call)", samples["null proxy"], samples["direct"], "ms", None)
    if SPLIT:
        report("gateway without recording vs null proxy (--split, diagnostic)", samples["no recording"],
               samples["null proxy"], "ms", None, "the recorder's call replaced by the forwarding alone: the gateway's own work")


async def handler_only(quick: bool) -> None:
    """``--handler``: the gateway's tools/call handler in-process (see the module's docstring)."""
    import mcp_types as types

    import sealbox
    from sealbox.gateway import Gateway
    from sealbox.gateway.server import check_request

    class Connection:  # what the handler reads of the SDK's per-client Connection
        def __init__(self) -> None:
            self.state: dict[str, Any] = {}
            self.exit_stack = contextlib.AsyncExitStack()
            self.client_params = None
            self.protocol_version = "2025-11-25"
            self.has_standalone_channel = False

    class Session:
        def __init__(self) -> None:
            self._connection = Connection()

    class Context:  # what the handler and check_request read of the SDK's request context
        method = "tools/call"
        meta = None
        request = None
        protocol_version = "2025-11-25"

        def __init__(self, session: Any, request_id: int, params: dict[str, Any]) -> None:
            self.session, self.request_id, self.params = session, request_id, params

    answer = types.CallToolResult(content=[types.TextContent(type="text", text="hello")])
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def upstream_call(tool: str, arguments: Any, *, progress: Any = None, meta: Any = None) -> Any:
        return answer

    n, reps = (500, 3) if quick else (2000, 5)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        for label, record in (("no recording", False), ("recorded (fast)", True), ("null proxy", None)):
            tmp = Path(d) / label.split()[0]
            tmp.mkdir()
            sealbox.init_store(tmp / "store").close()
            gw = Gateway(_config(tmp, "fast"))
            if record is False:
                _without_recording(gw)
            up = gw.upstreams["toy"]
            up.tools = {"echo": types.Tool(name="echo", description="echo", input_schema=schema)}
            up.state = "ready"
            up.call = upstream_call  # type: ignore[method-assign]
            session, limit = Session(), gw.config.limits.max_request_bytes

            async def one(i: int) -> float:
                raw = {"name": "toy__echo", "arguments": {"text": f"hello {i}"}}
                ctx = Context(session, i, raw)
                params = types.CallToolRequestParams(name="toy__echo", arguments=raw["arguments"])  # the SDK's work
                t0 = time.perf_counter_ns()
                if record is None:  # the null proxy's handler
                    await up.call(params.name.partition("__")[2], params.arguments)
                else:
                    check_request(ctx, limit)
                    await gw._call_tool(ctx, params)
                return (time.perf_counter_ns() - t0) / 1000

            for i in range(200):
                await one(i)
            medians = [statistics.median([await one(i) for i in range(n)]) for _ in range(reps)]
            results[label] = statistics.median(medians)
            gw.store.close()
    bare, rec, proxy = results["no recording"], results["recorded (fast)"], results["null proxy"]
    print(f"tools/call handler in-process, an upstream that answers at once (median of {reps} medians of {n} calls):")
    print(f"  null proxy {proxy:.1f} us, gateway without its recording {bare:.1f} us, gateway recorded (fast) "
          f"{rec:.1f} us: the gateway's own work {bare - proxy:.1f} us, the recording {rec - bare:.1f} us a call")


if __name__ == "__main__":
    if "--handler" in sys.argv:
        print_machine_once()
        anyio.run(handler_only, "--quick" in sys.argv)
        sys.exit(0)
    if "--concurrent" in sys.argv:
        CONCURRENCY = int(sys.argv[sys.argv.index("--concurrent") + 1])
    if "--rounds" in sys.argv:
        ROUNDS = int(sys.argv[sys.argv.index("--rounds") + 1])
    SPLIT = "--split" in sys.argv
    print_machine_once()
    anyio.run(main, "--quick" in sys.argv)
    print_table("Gateway")
