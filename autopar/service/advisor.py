"""The advisor API that users of seed (a) script against, as thin aliases over autopar's commands.

Each `GET /api/parallelism/<name>?…` reads its query (an unknown query parameter is a 422 naming it, with the
ones this alias takes), turns it into the options of one autopar command, runs that command as the CLI would
and answers its JSON (trimmed to what the alias is about). The numbers are the command's: no second model.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from autopar.layouts import Axis
from autopar.service.commands import Outcome, to_argv
from autopar.service.errors import error_body

Answer = Callable[[str, Outcome], JSONResponse]
_TP, _PP, _CP, _DP = Axis.TP.value, Axis.PP.value, Axis.CP.value, Axis.DP.value


@dataclass(frozen=True)
class Alias:
    """One advisor endpoint: its query parameters (name -> the command option it sets) and what it runs."""

    name: str
    summary: str
    command: str
    query: dict[str, str]
    shape: Callable[[dict[str, Any], dict[str, str]], Any] | None = None  # trims the command's JSON


def _roles(doc: dict[str, Any], q: dict[str, str]) -> Any:
    goal = q.get("goal", "fastest").lower()
    role = {"throughput": "fastest", "speed": "fastest", "cost": "cheapest", "memory": "most_headroom"}.get(
        goal, goal
    )
    picks = [r for r in doc.get("recommended", []) if r.get("role") == role]
    return {"goal": role, "pick": picks[0] if picks else None, "verdict": doc.get("verdict")}


def _validate(doc: dict[str, Any], _: dict[str, str]) -> Any:
    e = doc.get("estimate", {})
    return {"valid": True, "fits": e.get("fits"), "memory_verdict": doc.get("memory_verdict"), "estimate": e}


def _time_to_train(doc: dict[str, Any], q: dict[str, str]) -> Any:
    out = dict(doc)
    tokens = q.get("tokens")
    tps = doc.get("estimate", {}).get("tokens_per_s")
    if tokens and tps:
        from autopar.units import parse_tokens

        out["train_days"] = parse_tokens(tokens) / tps / 86_400
    return out


class AliasError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _int(q: dict[str, str], key: str) -> int:
    try:
        value = int(q[key])
    except ValueError:
        raise AliasError(key, f"{key}={q[key]!r}: a whole number") from None
    if value < 1:
        raise AliasError(key, f"{key}={value}: must be at least 1")
    return value


def _gpus(a: Alias, q: dict[str, str]) -> str | None:
    """The GPU count a query means: nodes x gpus (per node, default 8) for launch and slurm; dp x tp x pp when
    it gives dp; else its `gpus`."""
    if a.command == "launch" and "nodes" in q:
        return str(_int(q, "nodes") * (_int(q, "gpus") if "gpus" in q else 8))
    if _DP in q:
        return str(_int(q, _DP) * (_int(q, _TP) if _TP in q else 1) * (_int(q, _PP) if _PP in q else 1))
    return q.get("gpus")


def _slurm(doc: dict[str, Any], q: dict[str, str]) -> Any:
    """The SLURM script, its job named `name` when given (sbatch's --job-name takes letters, digits, -_.)."""
    script = str(doc.get("slurm") or "")
    name = q.get("name")
    if name:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise AliasError("name", f"name={name!r}: letters, digits, '-', '_' or '.' (at most 64)")
        script = re.sub(r"(?m)^#SBATCH --job-name=.*$", f"#SBATCH --job-name={name}", script)
    return {"slurm": script, "nodes": doc.get("nodes"), "gpus_per_node": doc.get("gpus_per_node")}


def _workload(doc: dict[str, Any], q: dict[str, str]) -> Any:
    """The pick for a workload: the workload asked (pretrain unless stated) and the optimize verdict."""
    return {"workload": q.get("workload", "pretrain"), "verdict": doc.get("verdict")}


def _one_model(doc: Any, q: dict[str, str]) -> Any:
    """The one model `models MODEL --json` listed (the catalog's record: architecture, parameter counts)."""
    return doc[0] if isinstance(doc, list) and doc else doc


ZERO_STAGES = (0, 1, 2, 3)  # DDP, distributed optimizer / ZeRO-1, ZeRO-2, ZeRO-3 / FSDP (autopar.knobs)


def _sharding(doc: Any, q: dict[str, str]) -> Any:
    """Memory per GPU of data parallelism over `dp` GPUs at each ZeRO stage (compare's rows, in stage order)."""
    rows = doc if isinstance(doc, list) else []
    return {
        _DP: int(q[_DP]),
        "stages": [
            {"zero": z, "label": r.get("label"), "memory_gib": r.get("memory_gib"), "fits": r.get("runs")}
            for z, r in zip(ZERO_STAGES, rows, strict=False)
        ],
    }


def _models_compared(doc: Any, q: dict[str, str]) -> Any:
    """The catalog records of the models `models=a,b` names (aliases resolved), side by side, in that order."""
    from autopar.catalog import get_model
    from autopar.errors import AutoparError

    records = {r.get("name"): r for r in doc} if isinstance(doc, list) else {}
    names = [x.strip() for x in q.get("models", "").split(",") if x.strip()]
    if len(names) < 2:
        raise AliasError(
            "models", "models: name two or more models, comma separated (e.g. llama-7b,llama-70b)"
        )
    out = []
    for name in names:
        try:
            out.append(records[get_model(name).name])
        except (AutoparError, KeyError) as e:
            raise AliasError("models", f"models: {e}") from None
    return {"models": out}


_PROBLEM = {"model": "model", "gpu": "gpu", "gpus": "gpus", "seq": "seq_len", "batch": "global_batch"}
# Commands that take no problem: run as `COMMAND [query argument] --json`
CATALOG_COMMANDS = ("models", "clusters", "profile")
_LAYOUT = {_TP: _TP, _PP: _PP}  # query parameter -> the estimate option of the same name
ALIASES = (
    Alias("presets", "The model presets", "models", {}),
    Alias("analyze-model", "One model's architecture and parameter counts (model= a preset or alias)", "models",
          {"model": ""}, _one_model),
    Alias("profiles", "The workload profiles: what each plans, optimises and its defaults", "profile", {}),
    Alias("compare", "Models side by side: architecture and parameter counts (models=a,b)", "models",
          {"models": ""}, _models_compared),
    Alias("profile", "The recommended strategy for a workload (pretrain or finetune)", "optimize",
          {**_PROBLEM, "workload": "workload"}, _workload),
    Alias("topology", "The cluster shorthands (GPU, host size, NVLink domain)", "clusters", {}),
    Alias("recommend", "The recommended strategy", "optimize", dict(_PROBLEM), lambda d, _: d.get("verdict")),
    Alias("pareto", "The Pareto set", "optimize", dict(_PROBLEM), lambda d, _: d.get("pareto")),
    Alias("optimize", "The pick for a goal (fastest, cheapest, memory, balanced)", "optimize",
          {**_PROBLEM, "goal": ""}, _roles),
    Alias("estimate", "Memory and step time of one layout; tokens= adds the days to train", "estimate",
          {**_PROBLEM, **_LAYOUT, _CP: _CP, _DP: "", "tokens": ""}, _time_to_train),
    Alias("validate", "Whether a layout is valid and fits", "estimate",
          {**_PROBLEM, **_LAYOUT, _DP: ""}, _validate),
    Alias("sharding", "Memory per GPU of data parallelism over dp GPUs at each ZeRO stage", "compare",
          {"model": "model", "gpu": "gpu", _DP: "", "seq": "seq_len", "batch": "global_batch"}, _sharding),
    Alias("launch", "Launch settings of a layout", "launch",
          {"model": "model", "nodes": "", "gpus": "", **_LAYOUT, "gpu": "gpu"}),
    Alias("slurm", "The SLURM script of a layout", "launch",
          {"model": "model", "name": "", "nodes": "", "gpus": "", **_LAYOUT},
          _slurm),
)  # fmt: skip
BY_NAME = {a.name: a for a in ALIASES}


def body_of(a: Alias, q: dict[str, str]) -> dict[str, Any]:
    """The command options an alias query stands for; AliasError naming an unknown parameter."""
    for key in q:
        if key not in a.query:
            close = difflib.get_close_matches(key, list(a.query), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            takes = ", ".join(a.query) or "none"
            raise AliasError(
                key, f"{key}: not a parameter of /api/parallelism/{a.name}{hint} (it takes: {takes})"
            )
    body: dict[str, Any] = {a.query[k]: v for k, v in q.items() if a.query.get(k)}
    gpus = _gpus(a, q)
    if gpus is not None and a.command not in CATALOG_COMMANDS:
        body["gpus"] = gpus
    if a.name == "sharding":
        if _DP not in q:
            raise AliasError(_DP, f"{_DP}: required (the data-parallel size, e.g. {_DP}=8)")
        body["labels"] = [f"DP{_int(q, _DP)}/Z{z}" for z in ZERO_STAGES]
    if a.command == "launch":
        body["strategy"] = " ".join(f"{k.upper()}{q[k]}" for k in (_TP, _PP) if k in q) or "TP1"
        body.pop(_TP, None), body.pop(_PP, None)
    return body


def advisor_routes(app: FastAPI, answer: Answer) -> None:
    """Register GET /api/parallelism/ (the index) and one GET per alias."""

    @app.get("/api/parallelism/", summary="The advisor API's endpoints (aliases of autopar's commands)")
    async def index() -> dict[str, Any]:
        return {
            "endpoints": [
                {"path": f"/api/parallelism/{a.name}", "summary": a.summary, "command": a.command,
                 "query": list(a.query)}
                for a in ALIASES
            ]
        }  # fmt: skip

    for alias in ALIASES:
        app.get(f"/api/parallelism/{alias.name}", summary=alias.summary, name=f"advisor-{alias.name}")(
            _endpoint(alias, answer)
        )


def _catalog_argv(a: Alias, q: dict[str, str]) -> list[str]:
    """`models MODEL --json` for analyze-model (the model is required), else `COMMAND --json`."""
    if a.name != "analyze-model":
        return [a.command, "--json"]
    if not q.get("model"):
        raise AliasError(
            "model", "model: required (a preset or alias, e.g. llama-3.1-70b; see /api/parallelism/presets)"
        )
    return [a.command, q["model"], "--json"]


def _endpoint(a: Alias, answer: Answer) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def endpoint(request: Request) -> JSONResponse:
        q = dict(request.query_params)
        try:
            body = body_of(a, q)
            argv = _catalog_argv(a, q) if a.command in CATALOG_COMMANDS else to_argv(a.command, body)
        except AliasError as e:
            return JSONResponse(error_body(str(e), e.field, "query"), status_code=422)
        outcome = await request.app.state.workers.call(argv)
        response = answer(a.command, outcome)
        if response.status_code != 200 or a.shape is None:
            return response
        try:
            return JSONResponse(a.shape(outcome.document, q))
        except AliasError as e:
            return JSONResponse(error_body(str(e), e.field, "query"), status_code=422)

    return endpoint
