"""CLI command `autopar serve`: the commands over HTTP, a web page and the advisor API (autopar/service/)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from autopar.cli.app import command, console
from autopar.errors import AutoparError, MissingExtraError, SpecError

TOKEN_ENV = "AUTOPAR_TOKEN"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
MIN_TOKEN_CHARS = 16  # a write token short enough to guess is refused


def read_token(token_file: Path | None) -> str | None:
    """The write token: --token-file's first line, else $AUTOPAR_TOKEN, else None (writes refused)."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise AutoparError(f"token-file={token_file}: cannot read it ({e})") from None
        token = text[0].strip() if text else ""
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if token and len(token) < MIN_TOKEN_CHARS:
        raise SpecError(f"token: {len(token)} characters; a write token needs at least {MIN_TOKEN_CHARS}")
    return token or None


def _need_extra() -> None:
    import importlib.util

    for module in ("fastapi", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(module, "serve", "autopar serve")


@command("serve")
def serve_cmd(
    host: Annotated[
        str, typer.Option(help="Address to listen on (default: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8000,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help=f"File whose first line is the write token \\[default: ${TOKEN_ENV}; none: writes off]."
        ),
    ] = None,
    max_jobs: Annotated[int, typer.Option(help="Jobs (optimize, whatif) run at once.", min=1, max=64)] = 2,
    workers: Annotated[int, typer.Option(help="Worker processes for the quick commands.", min=1, max=64)] = 2,
    max_body: Annotated[int, typer.Option(help="Largest request body, bytes.", min=1024)] = 1 << 20,
    studies: Annotated[
        str | None,
        typer.Option(
            help="Where optimize jobs keep their studies, listed at /api/studies: a journal file, sqlite:///file.db or "
            "a postgresql:// URL shared with the team's CLIs \\[default: $AUTOPAR_HOME/serve-studies.journal]."
        ),
    ] = None,
) -> None:
    """Serve autopar over HTTP: every command as a JSON endpoint (OpenAPI at /docs), optimize and whatif as
    jobs, the calibration store, the seed's advisor API (/api/parallelism/) and a web page at /.

    Writes (ingesting runs, starting a job) need the token (`Authorization: Bearer …`); without one the service
    answers reads only. It listens on this machine only unless --host says otherwise.
    """
    _need_extra()
    import uvicorn

    from autopar.service.api import Settings, create_app

    token = read_token(token_file)
    settings = Settings(
        token=token, max_body_bytes=max_body, max_jobs=max_jobs, quick_workers=workers, studies=studies or ""
    )
    if host not in LOCAL_HOSTS:
        console.print(f"note: listening on {host}: reachable from other machines", style="dim")
    writes = "writes need the token" if token else f"writes off (no ${TOKEN_ENV} or --token-file)"
    console.print(f"autopar serve: http://{host}:{port}/ (API docs /docs; {writes})", highlight=False)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
