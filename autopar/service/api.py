"""The FastAPI application of `autopar serve` (see autopar/service/__init__.py).

Endpoints (OpenAPI at /docs and /openapi.json):
- GET  /api/health; GET /api/models, /api/gpus, /api/clusters (the catalog, as `autopar models --json` …)
- POST /api/estimate, /api/compare, /api/fix, /api/launch: the command's --json answer, at once
- POST /api/optimize, /api/whatif: a job (202: its id and URL; `?wait=SECONDS` waits for the answer);
  GET /api/jobs, /api/jobs/{id}, /api/jobs/{id}/report (the search's HTML report, for optimize)
- GET  /api/calibrate/runs; POST /api/calibrate/ingest {"records": [...]}: the calibration store
- GET  /api/parallelism/...: the advisor API of the seed (aliases answered by the commands above; advisor.py)
- GET  /: the web page (a problem form, the verdict first, the search report below it)

Safety: writes (ingest, starting a job) need the token (`Authorization: Bearer …`; the service starts with
AUTOPAR_TOKEN or --token-file, and without one it refuses every write); bodies over `max_body_bytes` get 413;
at most `max_jobs` jobs at once (429 beyond); an error is one line in JSON, never a traceback.
"""

import asyncio
import hmac
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from autopar.files import autopar_home
from autopar.service.commands import Outcome, RequestError, params, request_model, to_argv
from autopar.service.errors import error_body
from autopar.service.jobs import Job, JobLimitError, Workers, new_job_id
from autopar.service.studies import job_study, study_argv, with_storage

SYNC_COMMANDS = ("estimate", "compare", "fix", "launch")
JOB_COMMANDS = ("optimize", "whatif")
CATALOG = ("models", "gpus", "clusters")
# The HTTP status of a command's exit code (cli/app.py: 2 bad input, 1 nothing fits, 3 the storage failed).
STATUS_OF_EXIT = {0: 200, 1: 409, 2: 422, 3: 503}
MAX_WAIT_S = 600.0
UNKNOWN_NAMES = {"cluster": "cluster_name"}  # "unknown cluster 'x'" names the --cluster option (cluster_name)
WARM_AFTER_S = 0.2


@dataclass(frozen=True)
class Settings:
    """How the service runs: its write token (None: writes refused), limits and worker processes."""

    token: str | None = None
    max_body_bytes: int = 1 << 20
    max_jobs: int = 2
    quick_workers: int = 2
    studies: str = ""  # where optimize jobs keep their studies ('' = <autopar home>/serve-studies.journal)


def _field_of(message: str, command: str) -> str | None:
    """The input a CLI message names first ('gpus=abc: …', 'seq-len: …'), when it is one of the command's."""
    names = {p.name for p in params(command)}
    m = (
        re.match(r"([a-z][a-z0-9_-]*)\s*[=:]", message)
        or re.match(r"--([a-z][a-z0-9_-]*)[ =]", message)  # '--workload rlhf: …', the CLI's own flag words
        or re.match(r"unknown (\w+) ", message, re.IGNORECASE)
    )
    name = m[1].lower().replace("-", "_") if m else ""
    name = UNKNOWN_NAMES.get(name, name)
    return name if name in names else None


def answer(command: str, outcome: Outcome) -> JSONResponse:
    """A command's outcome as an HTTP response: its JSON, or its one-line error under the matching status."""
    status = STATUS_OF_EXIT.get(outcome.exit_code, 500)
    if status == 200:
        return JSONResponse(outcome.document)
    message = outcome.error or f"`{command}` exited with {outcome.exit_code}"
    return JSONResponse(error_body(message, _field_of(message, command)), status_code=status)


def job_json(job: Job) -> dict[str, Any]:
    """A job as the API shows it; a failed one also carries `detail`, its error under the input it names."""
    out = job.view()
    if job.outcome is not None and job.outcome.exit_code != 0:
        out["detail"] = error_body(job.outcome.error, _field_of(job.outcome.error, job.command))["detail"]
    return out


def _require_token(request: Request) -> None:
    """Writes need the service's token as `Authorization: Bearer <token>` (401 otherwise)."""
    token = request.app.state.settings.token
    if token is None:
        raise _Refused(
            401, "writes are off: the service was started without a token (AUTOPAR_TOKEN or --token-file)"
        )
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise _Refused(401, "this write needs the service's token: send 'Authorization: Bearer <token>'")


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _workers(request: Request) -> Workers:
    return request.app.state.workers


def _sync_route(app: FastAPI, command: str) -> None:
    model = request_model(command)

    async def endpoint(request: Request, body: Any) -> JSONResponse:
        argv = to_argv(command, body.model_dump(exclude_none=True))
        return answer(command, await _workers(request).call(argv))

    endpoint.__annotations__["body"] = model
    doc = (getattr(_command_help(command), "strip", lambda: "")() or command).splitlines()[0]
    app.post(f"/api/{command}", summary=doc, name=command)(endpoint)


def _command_help(command: str) -> str:
    from autopar.service.commands import click_group

    return click_group().commands[command].help or ""


def _job_route(app: FastAPI, command: str) -> None:
    model = request_model(command)

    async def endpoint(request: Request, body: Any, wait: float = 0.0) -> JSONResponse:
        argv = to_argv(command, body.model_dump(exclude_none=True))
        report = None
        if command == "optimize":  # the search report, in a folder the service owns
            report = Path(tempfile.mkdtemp(prefix="autopar-job-")) / "report.html"
            argv = [*argv[: argv.index("--json")], "--out", str(report), *argv[argv.index("--json") :]]
        job_id = new_job_id()
        if (
            command == "optimize"
        ):  # its study in the service's storage: progress while it runs, a report after
            argv = with_storage(argv, request.app.state.settings.studies, job_study(job_id))
        job = _workers(request).start(command, argv, job_id)
        if report is not None:
            request.app.state.reports[job.id] = report
        if wait > 0:
            job = await _workers(request).wait(job, min(wait, MAX_WAIT_S))
        done = job.outcome is not None
        return JSONResponse(job_json(job), status_code=200 if done else 202)

    endpoint.__annotations__["body"] = model
    app.post(
        f"/api/{command}",
        summary=f"Start `autopar {command}` as a job (needs the token)",
        name=command,
        dependencies=[Depends(_require_token)],
    )(endpoint)


def _job_views(app: FastAPI) -> None:
    @app.get("/api/jobs", summary="Every job this service holds, newest first (without answers)")
    async def jobs(request: Request) -> list[dict[str, Any]]:
        held = sorted(_workers(request).jobs.values(), key=lambda j: -j.created)
        return [j.view(with_result=False) for j in held]

    @app.get("/api/jobs/{job_id}", summary="One job: its state and, once finished, its answer")
    async def job(request: Request, job_id: str) -> JSONResponse:
        found = _workers(request).jobs.get(job_id)
        if found is None:
            return JSONResponse(error_body(f"job_id={job_id!r}: no such job"), status_code=404)
        out = job_json(found)
        if found.command == "optimize" and found.outcome is None:  # how far the search is
            argv = study_argv("status", request.app.state.settings.studies, job_study(found.id))
            status = await _workers(request).call(argv)
            out["progress"] = status.document if status.exit_code == 0 else None
        return JSONResponse(out)

    @app.get("/api/jobs/{job_id}/report", summary="The search report (HTML) of a finished optimize job")
    async def job_report(request: Request, job_id: str) -> Any:
        path = request.app.state.reports.get(job_id)
        if path is None or not path.is_file():
            return JSONResponse(error_body(f"job_id={job_id!r}: no report (yet)"), status_code=404)
        return FileResponse(path, media_type="text/html")


def _listing(name: str) -> Callable[[Request], Awaitable[JSONResponse]]:
    """The endpoint of one catalog listing (a closure: no request input chooses the command)."""

    async def listing(request: Request) -> JSONResponse:
        return answer(name, await _workers(request).call([name, "--json"]))

    return listing


def _page(name: str) -> Callable[[], Awaitable[str]]:
    async def view() -> str:
        from autopar.service.page import page

        return page(name)

    return view


def _catalog(app: FastAPI) -> None:
    for name in CATALOG:
        listing = _listing(name)
        app.get(f"/api/{name}", summary=f"The built-in {name} (as `autopar {name} --json`)", name=name)(
            listing
        )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    s: Settings = app.state.settings
    app.state.workers = Workers(s.quick_workers, s.max_jobs)
    app.state.reports = {}
    # warm the workers once the service answers: start-up is not spent importing autopar in every process
    asyncio.get_running_loop().call_later(WARM_AFTER_S, app.state.workers.warm)
    try:
        yield
    finally:
        app.state.workers.close()


def _errors(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def bad_field(_: Request, e: RequestError) -> JSONResponse:
        return JSONResponse(error_body(str(e), e.field), status_code=422)

    @app.exception_handler(_Refused)
    async def refused(_: Request, e: _Refused) -> JSONResponse:
        return JSONResponse(error_body(str(e)), status_code=e.status)

    @app.exception_handler(JobLimitError)
    async def too_many(_: Request, e: JobLimitError) -> JSONResponse:
        return JSONResponse(error_body(str(e)), status_code=429)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": [_cli_words(request, x) for x in e.errors()]}, status_code=422)

    @app.exception_handler(Exception)
    async def internal(_: Request, e: Exception) -> JSONResponse:
        return JSONResponse(error_body(f"internal error: {type(e).__name__}: {e}"), status_code=500)


def _cli_words(request: Request, err: dict[str, Any]) -> dict[str, Any]:
    """A pydantic error in the CLI's words: an unknown field named with its close match and the inputs."""
    loc = [str(x) for x in err.get("loc", ())]
    field = loc[-1] if len(loc) > 1 else None
    msg = str(err.get("msg", "invalid"))
    command = request.url.path.removeprefix("/api/").strip("/")
    if err.get("type") == "json_invalid":
        why = (err.get("ctx") or {}).get("error", "")
        return {"loc": ["body"], "msg": f"the body is not valid JSON ({why})", "type": "json_invalid"}
    if (
        err.get("type") == "extra_forbidden"
        and field is not None
        and command in (*SYNC_COMMANDS, *JOB_COMMANDS)
    ):
        try:
            to_argv(command, {field: True})
        except RequestError as e:
            msg = str(e)
    elif field is not None:
        msg = f"{field}={err.get('input')!r}: {msg}"
    return {"loc": loc, "msg": msg, "type": err.get("type", "value_error")}


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service's FastAPI application (start it with uvicorn, as `autopar serve` does)."""
    from autopar import __version__
    from autopar.service.advisor import advisor_routes
    from autopar.service.calibrate import calibrate_routes
    from autopar.service.limits import BodyLimit
    from autopar.service.page import index_page
    from autopar.service.studies import study_routes

    app = FastAPI(
        title="autopar",
        version=__version__,
        description="How to parallelize LLM training on your GPUs: the autopar CLI over HTTP.",
        lifespan=_lifespan,
    )
    s = settings or Settings()
    app.state.settings = replace(s, studies=s.studies or str(autopar_home() / "serve-studies.journal"))
    app.add_middleware(BodyLimit, max_bytes=app.state.settings.max_body_bytes)

    @app.get("/api/health", summary="Liveness and version")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> str:
        return index_page()

    for name in ("compare", "whatif", "studies", "runs"):
        app.get(f"/{name}", response_class=HTMLResponse, include_in_schema=False, name=f"page-{name}")(
            _page(name)
        )

    _catalog(app)
    for command in SYNC_COMMANDS:
        _sync_route(app, command)
    for command in JOB_COMMANDS:
        _job_route(app, command)
    _job_views(app)
    calibrate_routes(app, answer, _require_token)
    advisor_routes(app, answer)
    study_routes(app, answer)
    _errors(app)
    return app


CallFn = Callable[[list[str]], Awaitable[Outcome]]
