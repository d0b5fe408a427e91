"""``sealbox gateway``: serve the MCP gateway, check its config, list, re-approve and revoke tool definitions."""

from __future__ import annotations

import json
from typing import Any

import click

from sealbox.cli.common import PortNumber, not_empty

__all__ = ["gateway_group"]


@click.group("gateway")
def gateway_group() -> None:
    """The MCP gateway: serve it, replay a recorded session, check its config, list pinned tool definitions
    (pins), re-approve changed tools, revoke an approved definition."""


def _sigterm_as_sigint(*, hangup: bool = False) -> None:
    """Handle SIGTERM (and SIGHUP with ``hangup``: a stdio gateway, whose terminal or session went
    away) as SIGINT (Ctrl-C): a clean shutdown, runs ended and the store closed (exit 0). Without
    ``hangup`` (an HTTP gateway), a SIGHUP is kept in :data:`_HANGUPS_WHILE_STARTING` (a reload once serving).

    Delegates to whatever handles SIGINT at that moment: asyncio's runner (cancels the serving
    task, whose sessions end their runs), uvicorn while it serves (it installs its own handlers
    for both), else Python's default (KeyboardInterrupt)."""
    import signal

    def handle(signum: int, frame: object) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handle)
    if hasattr(signal, "SIGHUP"):
        # over HTTP, a SIGHUP before serve_http installs its reload (the 'serving' line is printed before):
        # remembered in _HANGUPS_WHILE_STARTING and reloaded once serving; the default handler killed the gateway
        signal.signal(signal.SIGHUP, handle if hangup else lambda signum, frame: _HANGUPS_WHILE_STARTING.append(signum))


#: SIGHUPs an HTTP gateway got while it started (before its token reload was installed): the tokens
#: are reloaded once it serves (:func:`sealbox.gateway.transports.serve_http`'s ``hangups``)
_HANGUPS_WHILE_STARTING: list[int] = []


def _freeze_startup_heap() -> None:
    """Move the objects made while the gateway started (≈ 93,000: the MCP SDK's pydantic models, the
    config, the policy) to the garbage collector's permanent generation (:func:`gc.freeze`).

    They live until the process exits, so scanning them finds nothing: a full collection while
    serving skips them (≈ 47 ms of CPU each before, measured on a 2-core VM), and so does the
    one at interpreter exit (≈ 0.2 s of CPU at the end of a stdio session before). Objects made
    later are collected as usual; reference counting still frees frozen objects that are released."""
    import gc

    gc.freeze()


@gateway_group.command("serve")
@click.option("-c", "--config", "config_path", required=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="The gateway config file (gateway.yaml).")
@click.option("--http", "http_port", type=PortNumber(), default=None, metavar="PORT",
              help="Serve streamable HTTP on 127.0.0.1:PORT instead of stdio.")
def serve_cmd(config_path: str, http_port: int | None) -> None:
    """Serve the gateway over stdio (default) or streamable HTTP on 127.0.0.1 (--http PORT)."""
    # first: a stop asked for while the gateway starts is a clean stop too (exit 0); over HTTP, SIGHUP reloads
    # the tokens once it serves, over stdio it stops the gateway as SIGTERM does
    _sigterm_as_sigint(hangup=http_port is None)
    gateway = None
    try:
        gateway = _start_gateway(config_path)
        if gateway is None:
            return
        _freeze_startup_heap()
        _serve(gateway, http_port)
    except KeyboardInterrupt:
        pass
    finally:
        if gateway is not None:
            gateway.store.close()


def _start_gateway(config_path: str) -> Any:
    """The configured gateway, its store open; None when SIGINT / SIGTERM came while it started."""
    import logging
    import sys

    try:
        from sealbox.gateway.config import load_config
        from sealbox.gateway.server import Gateway

        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="sealbox-gateway: %(message)s")
        config = load_config(config_path)
        return Gateway(config, errlog=sys.stderr)
    except KeyboardInterrupt:
        return None


def _serve(gateway: Any, http_port: int | None) -> None:
    """Serve until the client leaves or a signal stops it (over stdio the process exits from here)."""
    import sys

    import anyio

    from sealbox.gateway.transports import serve_http, serve_stdio

    if http_port is None:
        gateway.check_default_run()  # SEALBOX_RUN_ID is fixed for the process: a run it cannot join stops it here

        def stopped() -> None:
            # the session has ended its run: sign the final checkpoint and exit without joining the
            # thread blocked reading stdin (serve_stdio)
            import os

            gateway.store.close()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

        anyio.run(lambda: serve_stdio(gateway, on_signal=stopped))
    else:
        from sealbox.gateway.transports import bind, http_app

        sock = bind(http_port)
        http_app(gateway, sock.getsockname()[1])  # fail on a config problem before serving
        click.echo(f"sealbox gateway: serving http://127.0.0.1:{sock.getsockname()[1]}/mcp", err=True)
        anyio.run(lambda: serve_http(gateway, http_port, sock=sock, hangups=_HANGUPS_WHILE_STARTING))


@gateway_group.command("replay")
@click.argument("run_id", metavar="RUN")
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=None, type=click.Path(),
              help="The store's data folder (default: the config's store, else ./.sealbox).")
@click.option("-c", "--config", "config_path", default=None, callback=not_empty, type=click.Path(dir_okay=False),
              help="The gateway config: its store, and its tokens for --http (its upstreams are never started).")
@click.option("--http", "http_port", type=PortNumber(), default=None, metavar="PORT",
              help="Serve streamable HTTP on 127.0.0.1:PORT instead of stdio (needs --config).")
@click.option("--until-calls", type=click.IntRange(1), default=None, metavar="N",
              help="End the replay after N calls (default: when the client disconnects).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("--output", "output_path", default=None, callback=not_empty, type=click.Path(dir_okay=False),
              help="Also write the JSON verdict to this file.")
def replay_cmd(run_id: str, store_path: str | None, config_path: str | None, http_port: int | None,
               until_calls: int | None, as_json: bool, output_path: str | None) -> None:
    """Serve recorded run RUN's tool list and results to an MCP client; report divergence in its calls.

    Nothing upstream is started or contacted. Over stdio the verdict goes to stderr (stdout
    carries the protocol). The replay is recorded as a new run. Exit status: 0 reproduced,
    1 diverged (a changed, extra or missing call), 2 an error (no client sent a request: nothing recorded).
    """
    import logging
    import sys

    import anyio

    from sealbox.gateway.replay import GatewayReplay
    from sealbox.store import open_store

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="sealbox-gateway: %(message)s")
    if http_port is not None and config_path is None:
        raise click.UsageError("--http needs --config: the bearer tokens of its `http.tokens` admit the clients")
    if config_path is not None and store_path is not None:
        source = click.get_current_context().get_parameter_source("store_path")
        if source is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("give --store or --config, not both (with --config the replay uses the config's store)")
        store_path = None  # $SEALBOX_STORE: the config names its own store
    config = None
    if config_path is not None:
        from sealbox.gateway.config import load_config

        config = load_config(config_path)
    store = open_store(store_path or (config.store if config is not None else ".sealbox"))
    target = None
    if output_path is not None:
        from sealbox.cli.common import BadInput
        from sealbox.interop.bundle import BundleError, open_target

        try:
            # before serving: a store file (sealbox.db, checkpoint, ...), a directory, a device or a
            # missing folder is refused now, not after the whole session has been replayed
            target = open_target(output_path, store_dir=getattr(store, "path", None))
        except BundleError as exc:
            store.close()
            raise BadInput(str(exc)) from None

    def emit(replay: GatewayReplay) -> int:
        report = replay.report()
        out = json.dumps(report, indent=2, ensure_ascii=False, default=str) if as_json else replay.render()
        click.echo(out, err=http_port is None)
        if target is not None:
            from sealbox.interop.bundle import BundleError

            try:
                target.commit((json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8"))
            except BundleError as exc:
                click.echo(f"error: {exc}", err=True)
                return 2
        return 0 if report["reproduced"] else 1

    def exit_now(replay: GatewayReplay) -> None:
        import os

        code = emit(replay)
        store.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    try:
        from sealbox.cli.common import resolve_id

        run_id = resolve_id(store, "run", run_id)
        replay = GatewayReplay(store, run_id, config=config, until_calls=until_calls)
        if http_port is None:
            replay.on_until_calls = exit_now
        try:
            if http_port is None:
                anyio.run(replay.serve_stdio)
            else:
                from sealbox.gateway.transports import bind, http_app

                sock = bind(http_port)
                http_app(replay, sock.getsockname()[1])  # type: ignore[arg-type]  # config problems first
                click.echo(f"sealbox gateway: replaying {run_id} at http://127.0.0.1:{sock.getsockname()[1]}/mcp",
                           err=True)
                anyio.run(lambda: replay.serve_http(http_port, sock=sock))
        except KeyboardInterrupt:
            pass
        code = emit(replay)
    finally:
        if target is not None:
            target.discard()
        store.close()
    if code:
        sys.exit(code)


@gateway_group.command("check")
@click.option("-c", "--config", "config_path", required=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="The gateway config file (gateway.yaml).")
def check_cmd(config_path: str) -> None:
    """Validate a gateway config file and what it names (store, policy, upstream commands, token
    variables), then print what it declares. Exit 2 with one line listing every problem."""
    from sealbox.errors import ConfigError
    from sealbox.gateway.config import load_config

    cfg = load_config(config_path)
    problems = _deep_problems(cfg)
    if problems:
        raise ConfigError(f"{config_path}: " + "; ".join(problems))
    count = len(cfg.upstreams)
    click.echo(f"ok: {config_path}: {count} upstream{'' if count == 1 else 's'} ({', '.join(u.id for u in cfg.upstreams)}), "
               f"separator {cfg.separator!r}, store {cfg.store} (durability {cfg.durability}), policy {cfg.policy}")


def _deep_problems(cfg) -> list[str]:  # noqa: ANN001
    """What ``serve`` would trip over later: the store, the policy, commands, token variables."""
    import os
    import shutil

    from sealbox.errors import SealboxError
    from sealbox.store import open_store

    problems: list[str] = []
    try:
        store = open_store(cfg.store, readonly=True)
    except SealboxError as exc:
        problems.append(f"store: {exc}")
    else:
        try:
            changed = store.content_policy_change() if hasattr(store, "content_policy_change") else None
            if changed:
                problems.append(f"store: {changed}")
            if not os.path.isfile(os.path.join(cfg.store, "log.key")):
                problems.append(f"store: {os.path.join(cfg.store, 'log.key')} is missing: the gateway could not "
                                "sign checkpoints")
        finally:
            store.close()
    if cfg.policy != "ALLOW_ALL":
        from sealbox.gateway.config import allow_all_hint
        from sealbox.policy import Policy

        try:
            Policy.load(cfg.policy)
        except SealboxError as exc:
            problems.append(f"policy: {exc}{allow_all_hint(cfg.policy)}")
        except OSError as exc:
            problems.append(f"policy: {cfg.policy}: {exc.strerror or exc}")
    for up in cfg.upstreams:
        unresolved = up.unresolved()  # ${VAR} naming an unset variable in an env or header value
        problems.extend(unresolved)
        if up.command is None:
            continue
        cwd = up.cwd or os.getcwd()
        # a bare name is looked up in PATH only, as the upstream is started (not in its cwd, nor here)
        env = up.env if unresolved else up.resolved_env()
        found = shutil.which(up.command, path=(env or {}).get("PATH") or os.environ.get("PATH"))
        local = os.path.join(cwd, up.command)
        if found is None:
            hint = (f" (a bare command name is looked up in PATH; write ./{up.command} for a file in the "
                    "upstream's cwd)" if "/" not in up.command and os.path.isfile(local) else "")
            problems.append(f"upstream {up.id}: command {up.command!r} is not found or not executable{hint}")
        if up.cwd is not None and not os.path.isdir(up.cwd):
            problems.append(f"upstream {up.id}: cwd {up.cwd} is not a folder")
    for token in cfg.tokens:
        try:
            token.resolve()
        except SealboxError as exc:
            problems.append(str(exc))
    if not any("token of" in p for p in problems):  # each variable is set: tokens given twice
        from sealbox.gateway.transports import token_identities

        try:
            token_identities(cfg)
        except SealboxError as exc:
            problems.append(str(exc).removeprefix(f"{cfg.source}: "))
    return problems


@gateway_group.command("reapprove")
@click.argument("server")
@click.argument("tool")
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=".sealbox", show_default=True,
              type=click.Path(), help="The store's data folder.")
@click.option("--reason", required=True, help="Why the new definition is fine (recorded and signed).")
@click.option("--key-file", required=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="Your identity's private key file (an enabled approver or admin).")
@click.option("--identity", default=None,
              help="Only a check: refuse unless the key file is this identity's (the key names who re-approves).")
@click.option("--hash", "schema_hash", default=None,
              help="The definition to approve (sha256:…), when it is not the latest recorded one (e.g. the one another "
                   "gateway on the store serves; `sealbox gateway pins` lists them).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded event as JSON.")
def reapprove_cmd(server: str, tool: str, store_path: str, reason: str, key_file: str, identity: str | None,
                  schema_hash: str | None, as_json: bool) -> None:
    """Approve the current definition of TOOL on SERVER after it changed (or the one --hash names): records
    tool.reapproved, signed with the key of an enabled identity with role approver or admin."""
    from sealbox.cli.common import open_for_writing
    from sealbox.gateway.pinning import reapprove

    if not reason.strip():
        raise click.UsageError("--reason must not be empty: say why (it is recorded and signed)")
    store = open_for_writing(store_path)
    try:
        payload = reapprove(store, server, tool, reason, key_file, identity=identity, schema_hash=schema_hash)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(f"re-approved {server}/{tool} ({payload['schema_hash']}) as {payload['identity']}")


@gateway_group.command("revoke")
@click.argument("server")
@click.argument("tool")
@click.option("--hash", "schema_hash", required=True, callback=not_empty,
              help="The approved definition to revoke (sha256:…; `sealbox gateway pins` lists them).")
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=".sealbox", show_default=True,
              type=click.Path(), help="The store's data folder.")
@click.option("--reason", required=True, help="Why the definition must no longer run (recorded and signed).")
@click.option("--key-file", required=True, callback=not_empty, type=click.Path(dir_okay=False),
              help="Your identity's private key file (an enabled approver or admin).")
@click.option("--identity", default=None,
              help="Only a check: refuse unless the key file is this identity's (the key names who revokes).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded event as JSON.")
def revoke_cmd(server: str, tool: str, schema_hash: str, store_path: str, reason: str, key_file: str,
               identity: str | None, as_json: bool) -> None:
    """Withdraw the approval of one definition of TOOL on SERVER (--hash): records tool.revoked, signed with the
    key of an enabled identity with role approver or admin. A gateway serving that definition denies the tool's
    calls (a running one from its next call) until it is re-approved (`sealbox gateway reapprove --hash`)."""
    from sealbox.cli.common import open_for_writing
    from sealbox.gateway.pinning import revoke

    if not reason.strip():
        raise click.UsageError("--reason must not be empty: say why (it is recorded and signed)")
    store = open_for_writing(store_path)
    try:
        payload = revoke(store, server, tool, schema_hash, reason, key_file, identity=identity)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(f"revoked {server}/{tool} ({payload['schema_hash']}) as {payload['identity']}")


@gateway_group.command("pins")
@click.argument("server", required=False)
@click.argument("tool", required=False)
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=".sealbox", show_default=True,
              type=click.Path(), callback=not_empty, help="The store's data folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the definitions as JSON.")
def pins_cmd(server: str | None, tool: str | None, store_path: str, as_json: bool) -> None:
    """Show each tool's recorded definitions (by hash) and which are approved: by its first listing,
    or by whom it was re-approved; and which were revoked, by whom and when. A gateway serving an approved
    definition is not blocked."""
    from sealbox.cli.common import BadInput, echo_json, open_for_reading, shown_id
    from sealbox.gateway.pinning import PinState

    store = open_for_reading(store_path)
    try:
        rows = PinState.load(store).summary(server, tool)
    finally:
        store.close()
    if not rows and server is not None:
        what = f"server {shown_id(server)}" if tool is None else f"tool {shown_id(tool)} of server {shown_id(server)}"
        raise BadInput(f"no tool definitions are recorded for {what}")
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no tool definitions are recorded (no gateway has listed an upstream on this store)")
        return
    for row in rows:
        latest = ("removed by its latest listing" if row["latest"] is None else
                  f"latest recorded {row['latest']} (leaf {row['latest_leaf']}): "
                  f"{'approved' if row['latest_approved'] else 'NOT APPROVED'}")
        click.echo(f"{row['server']}/{row['tool']}: {latest}")
        for d in row["definitions"]:
            how = "; ".join("first listing" + (f" (leaf {a['leaf']})" if a["leaf"] is not None else "")
                            if a["by"] == "first_listing" else f"re-approved by {a['by']} (leaf {a['leaf']})"
                            for a in d["approvals"])
            gone = "; ".join(f"re-approval by {a['by']} (leaf {a['leaf']}) withdrawn: key declared compromised"
                             for a in d["withdrawn"])
            revoked = "; ".join(f"revoked by {v['by']} at {v['at']} (leaf {v['leaf']})" for v in d["revoked"])
            state = (f"approved: {how}" if d["approved"] else
                     "REVOKED" + (f" (approved before: {how})" if how else "") if d["revoked"] else "not approved")
            click.echo(f"  {d['hash']}  recorded at leaf {d['leaf']}  {state}" + (f"; {gone}" if gone else "")
                       + (f"; {revoked}" if revoked else ""))
