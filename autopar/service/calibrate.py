"""The calibration store over HTTP: list the runs, add records or a training log, fit, and plan the next runs.

Each endpoint runs the `autopar calibrate` command a terminal would (`list`, `ingest`, `fit`, `plan`), so a run
ingested here is validated, deduplicated and stored exactly as there, in the service's store ($AUTOPAR_HOME). The
service writes the files a command reads (the records, the log) in a folder of its own, and a fit to its own
calibration file (`<autopar home>/serve-calibration.json`); requests never name a server path. Adding runs and
fitting are writes: they need the token.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from autopar.files import autopar_home
from autopar.service.commands import RequestError, to_argv
from autopar.service.errors import error_body

LOG_FORMATS = ("auto", "megatron-log", "torchtitan-log")
FIT_FILE = "serve-calibration.json"


def fit_path() -> Path:
    """Where the service keeps the calibration its fits write."""
    return autopar_home() / FIT_FILE


def log_argv(body: dict[str, Any], path: Path) -> list[str]:
    """`calibrate ingest PATH --format …` for a log body: {'log': text, 'format': …, + ingest's own options}."""
    options = {k: v for k, v in body.items() if k not in ("log", "format")}
    fmt = body.get("format", "auto")
    if fmt not in LOG_FORMATS:
        raise RequestError("format", f"format={fmt!r}: one of {', '.join(LOG_FORMATS)}")
    argv = to_argv("calibrate ingest", {**options, "fmt": fmt})
    return [*argv, "--", str(path)]


def calibrate_routes(app: FastAPI, answer: Callable[..., JSONResponse], token: Callable[..., None]) -> None:
    """GET /api/calibrate/runs; POST /api/calibrate/ingest, /ingest-log, /fit (token), /plan."""
    write = [Depends(token)]

    @app.get("/api/calibrate/runs", summary="The runs in the calibration store")
    async def runs(request: Request) -> JSONResponse:
        return answer("calibrate", await request.app.state.workers.call(["calibrate", "list", "--json"]))

    @app.post(
        "/api/calibrate/ingest", summary="Add run records to the store (needs the token)", dependencies=write
    )
    async def ingest(request: Request, body: dict[str, Any]) -> JSONResponse:
        records = body.get("records")
        if set(body) != {"records"} or not isinstance(records, list) or not records:
            return JSONResponse(error_body("records: send {'records': [ {run record}, … ]}", "records"), 422)
        with tempfile.TemporaryDirectory(prefix="autopar-ingest-") as tmp:
            path = Path(tmp) / "records.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
            argv = ["calibrate", "ingest", str(path), "--json"]
            return answer("calibrate", await request.app.state.workers.call(argv))

    @app.post(
        "/api/calibrate/ingest-log",
        summary="Add a Megatron-LM or torchtitan training log (needs the token); its config as ingest's options",
        dependencies=write,
    )
    async def ingest_log(request: Request, body: dict[str, Any]) -> JSONResponse:
        log = body.get("log")
        if not isinstance(log, str) or not log.strip():
            return JSONResponse(error_body("log: send the training log's text as 'log'", "log"), 422)
        with tempfile.TemporaryDirectory(prefix="autopar-log-") as tmp:
            path = Path(tmp) / "train.log"
            path.write_text(log, encoding="utf-8")
            return answer("calibrate", await request.app.state.workers.call(log_argv(body, path)))

    @app.post(
        "/api/calibrate/fit",
        summary="Fit the calibration on the store (needs the token); answers what the fit changed",
        dependencies=write,
    )
    async def fit(request: Request, body: dict[str, Any]) -> JSONResponse:
        argv = to_argv("calibrate fit", body)
        cut = argv.index("--json")
        argv = [*argv[:cut], "--out", str(fit_path()), *argv[cut:]]
        return answer("calibrate", await request.app.state.workers.call(argv))

    @app.post("/api/calibrate/plan", summary="The few short profiling runs that most shrink the pick's band")
    async def plan(request: Request, body: dict[str, Any]) -> JSONResponse:
        return answer("calibrate", await request.app.state.workers.call(to_argv("calibrate plan", body)))
