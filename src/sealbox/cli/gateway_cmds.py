"""``sealbox gateway``: serve the MCP gateway, check its config, re-approve changed tools."""

from __future__ import annotations

import getpass
import json

import click

__all__ = ["gateway_group"]


@click.group("gateway")
def gateway_group() -> None:
    """The MCP gateway: serve it, check its config, re-approve changed tools."""


@gateway_group.command("serve")
@click.option("-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The gateway config file (gateway.yaml).")
@click.option("--http", "http_port", type=click.IntRange(0, 65535), default=None,
              help="Serve streamable HTTP on 127.0.0.1:PORT instead of stdio.")
def serve_cmd(config_path: str, http_port: int | None) -> None:
    """Serve the gateway over stdio (default) or streamable HTTP on 127.0.0.1 (--http PORT)."""
    import logging
    import sys

    import anyio

    from sealbox.gateway.config import load_config
    from sealbox.gateway.server import Gateway
    from sealbox.gateway.transports import serve_http, serve_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="sealbox-gateway: %(message)s")
    config = load_config(config_path)
    gateway = Gateway(config, errlog=sys.stderr)
    try:
        if http_port is None:
            anyio.run(serve_stdio, gateway)
        else:
            from sealbox.gateway.transports import bind, http_app

            sock = bind(http_port)
            http_app(gateway, sock.getsockname()[1])  # fail on a config problem before serving
            click.echo(f"sealbox gateway: serving http://127.0.0.1:{sock.getsockname()[1]}/mcp", err=True)
            anyio.run(lambda: serve_http(gateway, http_port, sock=sock))
    except KeyboardInterrupt:
        pass
    finally:
        gateway.store.close()


@gateway_group.command("check")
@click.option("-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The gateway config file (gateway.yaml).")
def check_cmd(config_path: str) -> None:
    """Validate a gateway config file and print what it declares."""
    from sealbox.gateway.config import load_config

    cfg = load_config(config_path)
    click.echo(f"ok: {config_path}: {len(cfg.upstreams)} upstreams ({', '.join(u.id for u in cfg.upstreams)}), "
               f"separator {cfg.separator!r}, store {cfg.store}")


@gateway_group.command("reapprove")
@click.argument("server")
@click.argument("tool")
@click.option("-s", "--store", "store_path", envvar="SEALBOX_STORE", default=".sealbox", show_default=True,
              type=click.Path(), help="The store's data folder.")
@click.option("--identity", default=None, help="Who re-approves (default: user:<login name>).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded event as JSON.")
def reapprove_cmd(server: str, tool: str, store_path: str, identity: str | None, as_json: bool) -> None:
    """Approve the current definition of TOOL on SERVER after it changed (records tool.reapproved)."""
    from sealbox.errors import ConfigError
    from sealbox.events import SYSTEM_RUN_ID, EventDraft
    from sealbox.gateway.pinning import PinState
    from sealbox.store import open_store

    store = open_store(store_path)
    try:
        pins = PinState.load(store)
        pending = pins.pending(server, tool)
        if pending is None:
            state = "is not known" if (server, tool) not in pins.known else "has no unapproved change"
            raise ConfigError(f"{server}/{tool} {state}; nothing to re-approve")
        who = identity or f"user:{getpass.getuser()}"
        payload = {"server": server, "tool": tool, "identity": who, "schema_hash": pending}
        store.append([EventDraft("tool.reapproved", payload, run_id=SYSTEM_RUN_ID, principal=who)])
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(f"re-approved {server}/{tool} ({pending}) as {who}")
