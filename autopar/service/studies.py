"""The service's studies: every optimize job keeps its Optuna study in the service's storage, so that a job in
progress shows how far it is, and every study there (a tune's, another team member's `optimize --storage` on the
same database) can be listed, followed and reported on.

The storage is the service's (`autopar serve --studies`: a journal file, SQLite or a PostgreSQL URL shared with the
team's CLIs); requests name studies, never storages. Reads go through the CLI's `study status` / `study report`
commands, so a study reads the same here as in a terminal.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse

from autopar.service.errors import error_body

STUDY_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def job_study(job_id: str) -> str:
    """The study name of an optimize job."""
    return f"serve-{job_id}"


def with_storage(argv: list[str], storage: str, study: str) -> list[str]:
    """An optimize argv that keeps its study in the service's storage under `study`."""
    cut = argv.index("--json")
    return [*argv[:cut], "--storage", storage, "--study-name", study, *argv[cut:]]


def study_argv(sub: str, storage: str, name: str, *extra: str) -> list[str]:
    """`autopar study SUB --storage STORAGE --study-name NAME [EXTRA] --json`: how the service reads a study."""
    return ["study", sub, "--storage", storage, "--study-name", name, *extra, "--json"]


def _summaries(storage: str) -> list[dict[str, Any]]:
    import optuna

    from autopar.search.storage import open_storage

    summaries = optuna.get_all_study_summaries(open_storage(storage, create=True), include_best_trial=False)
    return [
        {
            "name": s.study_name,
            "trials": s.n_trials,
            "started": s.datetime_start.isoformat() if s.datetime_start else None,
        }
        for s in summaries
    ]


def _tunes(storage: str) -> list[dict[str, Any]]:
    """The tunes' studies in the storage: name, candidates, trials, when it started and how it ended."""
    import optuna

    from autopar.search.storage import open_storage
    from autopar.tune.study import STOPPED_ATTR, TUNE_ATTR

    summaries = optuna.get_all_study_summaries(open_storage(storage, create=True), include_best_trial=False)
    out = []
    for s in summaries:
        tune = s.user_attrs.get(TUNE_ATTR)
        if not isinstance(tune, dict):
            continue
        stopped = s.user_attrs.get(STOPPED_ATTR)
        out.append(
            {
                "name": s.study_name,
                "candidates": len(tune.get("candidates") or []),
                "trials": s.n_trials,
                "started": s.datetime_start.isoformat() if s.datetime_start else None,
                "stopped": stopped if isinstance(stopped, dict) else None,
            }
        )
    return out


def _bad_name(name: str) -> JSONResponse | None:
    if STUDY_NAME.fullmatch(name):
        return None
    return JSONResponse(
        error_body(f"study={name!r}: letters, digits and _ . : - (at most 128)", "study", "path"), 422
    )


def _answer(request: Request, outcome: Any, answer: Any) -> JSONResponse:
    """A study command's answer; an unknown study is a 404, and the storage's location is never shown."""
    storage = request.app.state.settings.studies
    error = outcome.error.replace(storage, "the service's storage") if outcome.error else outcome.error
    if outcome.exit_code != 0 and "no such study" in error:
        return JSONResponse(error_body(error, "study", "path"), status_code=404)
    return answer("study", replace(outcome, error=error))


def study_routes(app: FastAPI, answer: Any) -> None:
    """GET /api/studies, /api/studies/{name} (status), /api/studies/{name}/pareto, /api/studies/{name}/report."""

    @app.get(
        "/api/studies", summary="The studies in the service's storage (optimize jobs, tunes, the team's CLIs)"
    )
    async def studies(request: Request) -> JSONResponse:
        import asyncio

        rows = await asyncio.to_thread(_summaries, request.app.state.settings.studies)
        return JSONResponse({"studies": sorted(rows, key=lambda r: r["started"] or "", reverse=True)})

    @app.get("/api/studies/{name}", summary="A study's trials per state, feasible count and budget")
    async def status(request: Request, name: str) -> JSONResponse:
        if (bad := _bad_name(name)) is not None:
            return bad
        argv = study_argv("status", request.app.state.settings.studies, name)
        return _answer(request, await request.app.state.workers.call(argv), answer)

    @app.get(
        "/api/studies/{name}/pareto", summary="What a study holds so far: its verdict, Pareto set, picks"
    )
    async def pareto(request: Request, name: str) -> JSONResponse:
        if (bad := _bad_name(name)) is not None:
            return bad
        argv = study_argv("report", request.app.state.settings.studies, name)
        return _answer(request, await request.app.state.workers.call(argv), answer)

    _report_route(app, answer)
    _tune_routes(app, answer)


def _tune_routes(app: FastAPI, answer: Any) -> None:
    """GET /api/tunes and /api/tunes/{name}: the tunes sharing the service's storage and their runs."""

    @app.get("/api/tunes", summary="The tunes in the service's storage (`autopar tune --storage` on it)")
    async def tunes(request: Request) -> JSONResponse:
        import asyncio

        rows = await asyncio.to_thread(_tunes, request.app.state.settings.studies)
        return JSONResponse({"tunes": sorted(rows, key=lambda r: r["started"] or "", reverse=True)})

    @app.get(
        "/api/tunes/{name}",
        summary="A tune's runs in order (RUNNING while a job runs), the best so far and how it ended",
    )
    async def tune_runs(request: Request, name: str) -> JSONResponse:
        if (bad := _bad_name(name)) is not None:
            return bad
        argv = study_argv("runs", request.app.state.settings.studies, name)
        return _answer(request, await request.app.state.workers.call(argv), answer)


def _report_route(app: FastAPI, answer: Any) -> None:
    """GET /api/studies/{name}/report: the HTML report `autopar study report --out` writes."""

    @app.get(
        "/api/studies/{name}/report",
        summary="A study's HTML report, as `autopar study report --out` writes it",
    )
    async def report(request: Request, name: str) -> Any:
        import tempfile
        from pathlib import Path

        if (bad := _bad_name(name)) is not None:
            return bad
        out = Path(tempfile.mkdtemp(prefix="autopar-study-")) / "report.html"
        storage = request.app.state.settings.studies
        argv = study_argv("report", storage, name, "--out", str(out))
        outcome = await request.app.state.workers.call(argv)
        if outcome.exit_code != 0 or not out.is_file():
            return _answer(request, outcome, answer)
        return FileResponse(out, media_type="text/html")
