"""``orchestra serve`` and ``hash-key``: host agents and pipelines over HTTP, and make its API keys."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from orchestra.cli._options import OtlpOption, start_tracing
from orchestra.cli._output import err, fail, json_logs, out
from orchestra.errors import OrchestraError

__all__ = ["app"]

app = typer.Typer()


@app.command()
def serve(
    config: Annotated[
        Path,
        typer.Argument(
            help="The server config (YAML): hosted specs, storage, API keys.", exists=True, dir_okay=False
        ),
    ],
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to listen on.")] = 8000,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Server processes (they share the storage).")
    ] = 1,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            metavar="IPS",
            help="Behind a TLS proxy: the proxy addresses whose X-Forwarded-Proto/For are trusted (so the "
            "dashboard cookie is Secure), comma-separated, or '*'.",
        ),
    ] = None,
    otlp_endpoint: OtlpOption = None,
    graceful_timeout: Annotated[
        int,
        typer.Option(
            "--graceful-timeout",
            min=0,
            metavar="SECONDS",
            help="After SIGTERM, how long open requests and streams may take before they are cancelled "
            "(a turn cut then stores nothing; background runs are left for another server).",
        ),
    ] = 20,
    temporal: Annotated[
        str | None,
        typer.Option(
            "--temporal",
            metavar="URI",
            help="temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE: hosted graphs and swarms run on the Temporal "
            "workers of that queue (in place of the config's temporal:; needs the temporal extra and "
            "storage the workers share).",
        ),
    ] = None,
    access_log: Annotated[
        str,
        typer.Option(
            "--access-log",
            metavar="on|off",
            help="A line per request on stderr (method, route, status, duration, request and run ids; "
            "JSON under --log-format json). Never a body, a key or a token.",
        ),
    ] = "on",
) -> None:
    """Host agents and pipelines over HTTP, with a dashboard at /.

    Example: [bold]orchestra serve server.yaml --port 8000 --workers 2[/]
    """
    import uvicorn

    from orchestra.server import CONFIG_ENV_VAR, TEMPORAL_ENV_VAR, load_config
    from orchestra.server.access_log import ACCESS_LOG_ENV_VAR

    if access_log not in ("on", "off"):
        raise typer.BadParameter("use on or off", param_hint="--access-log")
    try:
        load_config(config, temporal=temporal)
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    if temporal is not None:
        os.environ[TEMPORAL_ENV_VAR] = temporal
    start_tracing(otlp_endpoint, "orchestra-serve")  # the app factory configures each worker process
    os.environ[CONFIG_ENV_VAR] = str(config.resolve())
    os.environ[ACCESS_LOG_ENV_VAR] = "off" if access_log == "off" else "json" if json_logs() else "console"
    _check_port(host, port)
    err.print(f"serving {config} on http://{host}:{port} ({workers} worker(s))", highlight=False)
    try:
        uvicorn.run(
            "orchestra.server.app:create_app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            proxy_headers=forwarded_allow_ips is not None,
            forwarded_allow_ips=forwarded_allow_ips,
            timeout_graceful_shutdown=graceful_timeout,
        )
    except SystemExit as exc:
        if exc.code in (None, 0):
            raise
        # uvicorn exits 3 when it cannot start (3 is this command's "waiting for a human"): say so.
        raise fail(f"the server on {host}:{port} did not start (see the line above)") from None


def _check_port(host: str, port: int) -> None:
    """Refuse a port that is taken before saying "serving" (uvicorn would log and exit 3 after it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise fail(
                f"cannot listen on {host}:{port}: {exc.strerror}. Stop what holds it, or pick another --port"
            ) from None


@app.command("hash-key")
def hash_key_command(
    key: Annotated[str, typer.Argument(help="An API key to put in a server config.")],
) -> None:
    """Print the SHA-256 of an API key, as a server config's api_keys stores it.

    Example: [bold]orchestra hash-key "$(openssl rand -hex 24)"[/]
    """
    from orchestra.server import hash_key

    out.print(hash_key(key), highlight=False)
