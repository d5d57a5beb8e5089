"""CLI commands `autopar models` and `autopar gpus`: list the built-in catalogs as tables or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from autopar.cli.app import command, console, emit_json
from autopar.errors import UnknownNameError

if TYPE_CHECKING:
    from autopar.specs import GPUSpec, ModelSpec

_JSON = typer.Option(False, "--json", help="Print JSON (SI units) instead of a table.")
_QUERY = typer.Argument(
    None, help="Only entries whose name or an alias contains this text (loosely matched)."
)


def _matches(query: str | None, name: str, aliases: tuple[str, ...]) -> bool:
    """Loose substring match of a filter against a name and its aliases."""
    from autopar.catalog.names import loose_key

    if not query:
        return True
    q = loose_key(query)
    return any(q in loose_key(label) for label in (name, *aliases))


def short_source(url: str) -> str:
    """A compact label for a source URL (hf:org/repo, arXiv:id, gh:org/repo/file), for narrow tables."""
    parts = urlparse(url)
    path = [p for p in parts.path.split("/") if p]
    host = parts.netloc.removeprefix("www.")
    if host == "huggingface.co" and len(path) >= 2:
        return f"hf:{path[0]}/{path[1]}"
    if host == "arxiv.org" and path:
        return f"arXiv:{path[-1]}"
    if host == "github.com" and len(path) >= 2:
        return f"gh:{path[0]}/{path[1]}" + (f"/{path[-1]}" if len(path) > 2 else "")
    return host or url


def model_kind(m: ModelSpec) -> str:
    """'dense', or 'MoE 256x8+1s' (routed experts x top-k, + shared experts) for a mixture of experts."""
    if not m.is_moe:
        return "dense"
    shared = f"+{m.shared_experts}s" if m.shared_experts else ""
    return f"MoE {m.experts}x{m.topk}{shared}"


def model_record(m: ModelSpec) -> dict[str, Any]:
    """A model as a JSON-ready dict: its spec fields plus derived parameter counts and notes."""
    from autopar.catalog.loader import model_catalog
    from autopar.perf.params import count_params

    counts = count_params(m)
    return m.model_dump(mode="json") | {
        "kind": "moe" if m.is_moe else "dense",
        "total_params": counts.total,
        "active_params": counts.active,
        "notes": model_catalog().notes.get(m.name, ""),
    }


def gpu_record(g: GPUSpec) -> dict[str, Any]:
    """A GPU as a JSON-ready dict: its spec fields plus notes."""
    from autopar.catalog.loader import gpu_catalog

    return g.model_dump(mode="json") | {"notes": gpu_catalog().notes.get(g.name, "")}


def _table(
    title: str, headers: list[str], rows: list[list[str]], left: int, shrink: int | None = None
) -> Table:
    """A rich table, one header word per line; cells keep their width, only column `shrink` is cut when narrow."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, head in enumerate(headers):
        width = max([len(r[i]) for r in rows] + [len(w) for w in head.split()])
        t.add_column(
            Text(head.replace(" ", "\n")),  # autopar's header, one word per line
            justify="left" if i < left else "right",
            style="bold" if i == 0 else None,
            no_wrap=True,
            overflow="ellipsis",
            min_width=None if i == shrink else width,
        )
    for r in rows:
        t.add_row(*r)
    return t


def _models_table(models: list[ModelSpec]) -> Table:
    from autopar.perf.params import count_params

    rows = []
    for m in models:
        c = count_params(m)
        rows.append(
            [
                m.name,
                model_kind(m),
                str(m.layers),
                str(m.hidden),
                f"{m.heads}/{m.kv}",
                f"{c.total / 1e9:,.2f}",
                f"{c.active / 1e9:,.2f}",
                short_source(m.source),
            ]
        )
    headers = ["name", "kind", "layers", "hidden", "heads/kv", "params B", "active B", "source"]
    t = _table("autopar models (parameters from autopar.perf.params; B = 1e9)", headers, rows, 2, shrink=7)
    t.columns[-1].justify = "left"
    return t


def _on_demand_price(g: GPUSpec) -> float | None:
    """The price book's on-demand $/GPU-h (what optimize and whatif use), else the catalog's flat default."""
    from autopar.catalog.pricefile import default_price_book
    from autopar.catalog.prices import resolve_price

    r = resolve_price(g, default_price_book(), "on_demand")
    return None if r.origin == "assumed" else r.usd_per_gpu_hour


def _gpus_table(gpus: list[GPUSpec]) -> Table:
    prices = {g.name: _on_demand_price(g) for g in gpus}
    rows = [
        [
            g.name,
            f"{g.memory_bytes / 1e9:,.0f}",
            f"{g.bf16_flops / 1e12:,.0f}",
            f"{g.fp8_flops / 1e12:,.0f}" if g.fp8_flops else "-",
            f"{g.hbm_bw / 1e12:.2f}",
            f"{g.scaleup_bw / 1e9:,.0f}",
            f"{g.scaleout_bw / 1e9:,.0f}",
            str(g.scaleup_domain),
            f"{prices[g.name]:.2f}" if prices[g.name] is not None else "-",
        ]
        for g in gpus
    ]
    headers = [
        "name",
        "mem GB",
        "BF16 TF/s",
        "FP8 TF/s",
        "HBM TB/s",
        "NVLink GB/s",
        "NIC GB/s",
        "domain",
        "$/h",
    ]
    return _table(
        "autopar GPUs (dense TFLOP/s; bandwidth per GPU per direction; on-demand $/GPU-h from `autopar prices`)",
        headers,
        rows,
        1,
    )


@command("models")
def models(query: str | None = _QUERY, json_out: bool = _JSON) -> None:
    """List the built-in models (architecture, total/active parameters, source)."""
    from autopar.catalog import list_models

    chosen = [m for m in list_models() if _matches(query, m.name, m.aliases)]
    if not chosen:
        raise UnknownNameError("model", query or "", [m.name for m in list_models()])
    if json_out:
        emit_json([model_record(m) for m in chosen], indent=2)
        return
    console.print(_models_table(chosen))


@command("gpus")
def gpus(query: str | None = _QUERY, json_out: bool = _JSON) -> None:
    """List the built-in GPUs (memory, peaks, bandwidths, NVLink domain, default price)."""
    from autopar.catalog import list_gpus

    chosen = [g for g in list_gpus() if _matches(query, g.name, g.aliases)]
    if not chosen:
        raise UnknownNameError("GPU", query or "", [g.name for g in list_gpus()])
    if json_out:
        emit_json([gpu_record(g) for g in chosen], indent=2)
        return
    console.print(_gpus_table(chosen))


@command("version")
def version(as_json: bool = _JSON) -> None:
    """Print autopar's version, the libraries it relies on and the framework releases `launch` targets."""
    import platform
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as pkg_version

    import autopar
    from autopar.launch.schema import VERSIONS

    libs: dict[str, str | None] = {}
    for dep in ("optuna", "scikit-learn", "pandas", "plotly", "pydantic", "typer"):
        try:
            libs[dep] = pkg_version(dep)
        except PackageNotFoundError:
            libs[dep] = None
    targets = {fw: v[0] for fw, v in VERSIONS.items()}
    if as_json:
        emit_json(
            {
                "autopar": autopar.__version__,
                "python": platform.python_version(),
                "libraries": libs,
                "launch_targets": targets,
            }
        )
        return
    parts = [f"autopar {autopar.__version__}"] + [f"{k} {v or '(not installed)'}" for k, v in libs.items()]
    console.print(" · ".join(parts), highlight=False)
    console.print("launch targets: " + ", ".join(f"{k} {v}" for k, v in targets.items()), highlight=False)


@command("profile")
def profile(as_json: bool = _JSON) -> None:
    """List the workloads `--workload` plans: what a step is, what the search optimises, the defaults each sets
    (unless an option states them) and their source; rlhf and serve are listed but not planned yet."""
    from autopar.workloads import WORKLOAD_PROFILES

    if as_json:
        emit_json([_profile_record(p) for p in WORKLOAD_PROFILES], indent=2)
        return
    table = Table(title="autopar workloads (--workload NAME)", title_justify="left", box=box.SIMPLE_HEAD)
    for head in ("workload", "planned", "a step", "optimises", "defaults", "source"):
        table.add_column(head, overflow="fold")
    for p in WORKLOAD_PROFILES:
        defaults = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in p.defaults.items())
        table.add_row(p.name, "yes" if p.modelled else "not yet", p.step, p.optimises, defaults, p.source)
    console.print(table)


def _profile_record(p: Any) -> dict[str, Any]:
    return {
        "name": p.name,
        "planned": p.modelled,
        "step": p.step,
        "optimises": p.optimises,
        "defaults": dict(p.defaults),
        "source": p.source,
    }
