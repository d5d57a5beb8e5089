"""Reading price files: the built-in YAML and user YAML/CSV overrides, validated row by row.

Every problem raises `DataError` naming the file, the row (or entry), the field and the value.
Formats: the nested built-in form ``gpus: {GPU: {tier: {quotes: [...]}}}`` (or a bare mapping
``GPU: {tier: price}``), a list of rows (``prices: [{gpu, tier, usd_per_gpu_hour, source}]``), or CSV with
columns ``gpu,tier,usd_per_gpu_hour[,source,date,note]`` plus the owned-hardware columns of `OwnedCost`.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from autopar.catalog.prices import (
    TIERS,
    OwnedCost,
    PriceBook,
    PriceEntry,
    Quote,
    catalog_canonical,
    catalog_names,
    norm_name,
    normalize_tier,
)
from autopar.errors import AutoparError, DataError, UnknownNameError
from autopar.inputs import CONFIG_MAX_BYTES, csv_rows, parse_yaml, read_text, shown
from autopar.units import drop_thousands_commas

BUILTIN_PRICES = Path(__file__).resolve().parent.parent / "data" / "prices.yaml"
_OWNED_FIELDS = (
    "capex_usd",
    "amortization_years",
    "power_kw",
    "usd_per_kwh",
    "pue",
    "utilization",
    "overhead_usd_per_hour",
)
_ENTRY_FIELDS = {"gpu", "tier", "usd_per_gpu_hour", "source", "date", "note", "quotes", *_OWNED_FIELDS}


def _date_key(date: str) -> str:
    """Sortable form of '2026', '2026-Q1', '2026-03', '2026-03-17'."""
    m = re.fullmatch(r"(\d{4})-Q([1-4])", date)
    return f"{m.group(1)}-{3 * int(m.group(2)) - 2:02d}" if m else date


# Sanity bound on a price per GPU-hour: the dearest rented accelerator lists near $15/h and an owned one
# amortizes to a few $/h, so $1000/h is a typo (a price per node-month, a missing decimal point).
MAX_USD_PER_GPU_HOUR = 1000.0
# ... and $0.001/h a unit error the other way (a price per GPU-second, per node-year): the cheapest spot
# accelerators rent for ~$0.10/h. Without it a denormal 5e-324 passed "> 0" and made every cost $0.00.
MIN_USD_PER_GPU_HOUR = 0.001


def _where(path: str, row: str) -> str:
    return f"prices file {path}, {row}"


def _number(
    value: Any,
    *,
    where: str,
    field: str,
    low: float | None = 0.0,
    low_open: bool = False,
    high: float | None = None,
) -> float:
    """Parse a numeric field; DataError naming file, row, field and value when invalid."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where}, field {field}: missing value")
    if isinstance(value, bool):
        raise DataError(f"{where}, field {field}: {value!r} is not a number")
    plain = drop_thousands_commas(value.strip().lstrip("$")) if isinstance(value, str) else None
    if isinstance(value, str) and plain is None:  # '1,e5' is not 100000
        raise DataError(f"{where}, field {field}: {value!r} is not a number (e.g. 2.5, $1,234.50, 1e3)")
    try:
        x = float(plain) if plain is not None else float(value)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{where}, field {field}: {value!r} is not a number") from None
    if not math.isfinite(x):
        raise DataError(f"{where}, field {field}: {value!r} must be finite")
    if low is not None and (x < low or (low_open and x == low)):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        raise DataError(f"{where}, field {field}: {value!r} must be {bound}")
    if high is not None and x > high:
        raise DataError(f"{where}, field {field}: {value!r} must be <= {high:g}")
    return x


def _owned(raw: Mapping[str, Any], where: str) -> OwnedCost:
    """Build an OwnedCost from a row's owned-hardware fields (validated)."""
    for req in ("capex_usd", "amortization_years", "power_kw", "usd_per_kwh"):
        if raw.get(req) in (None, ""):
            raise DataError(
                f"{where}, field {req}: missing value (owned hardware needs capex_usd, "
                "amortization_years, power_kw, usd_per_kwh; optional pue, utilization, "
                "overhead_usd_per_hour)"
            )

    def opt(name: str, default: float) -> Any:
        v = raw.get(name)
        return default if v in (None, "") else v

    return OwnedCost(
        capex_usd=_number(raw["capex_usd"], where=where, field="capex_usd"),
        amortization_years=_number(
            raw["amortization_years"], where=where, field="amortization_years", low_open=True
        ),
        power_kw=_number(raw["power_kw"], where=where, field="power_kw"),
        usd_per_kwh=_number(raw["usd_per_kwh"], where=where, field="usd_per_kwh"),
        pue=_number(opt("pue", 1.0), where=where, field="pue", low=1.0),
        utilization=_number(
            opt("utilization", 1.0), where=where, field="utilization", low_open=True, high=1.0
        ),
        overhead_usd_per_hour=_number(
            opt("overhead_usd_per_hour", 0.0), where=where, field="overhead_usd_per_hour"
        ),
    )


def _tier(value: Any, where: str) -> str:
    try:
        return normalize_tier(value)
    except AutoparError:
        raise DataError(
            f"{where}, field tier: {shown(value)} is not a pricing tier; allowed: {', '.join(TIERS)}"
        ) from None


def _gpu_key(value: Any, where: str, known_keys: Iterable[str]) -> str:
    """Resolve a GPU name from a file to the catalog's canonical name (or keep it if no catalog)."""
    if value is None or not str(value).strip():
        raise DataError(f"{where}, field gpu: missing value")
    name = str(value).strip()
    canonical = catalog_canonical(name)
    if canonical is not None:
        return canonical
    known = {norm_name(k): k for k in known_keys}
    if norm_name(name) in known:
        return known[norm_name(name)]
    err = UnknownNameError("GPU", name, catalog_names() + list(known.values()))
    raise DataError(f"{where}, field gpu: {err}")


def _sources_text(sources: Mapping[str, Any], ref: Any) -> tuple[str, str]:
    """(title + url, date) for a source id; a free-text source is returned as is."""
    if isinstance(ref, str) and ref in sources:
        s = sources[ref]
        return f"{s.get('title', ref)} <{s.get('url', '')}>", str(s.get("date", ""))
    return str(ref or ""), ""


def _check_price(entry: PriceEntry, where: str) -> PriceEntry:
    """An entry whose price per GPU-hour is finite, > 0 (0 makes "cheapest" arbitrary) and sane."""
    x = entry.usd_per_gpu_hour
    if not (math.isfinite(x) and MIN_USD_PER_GPU_HOUR <= x <= MAX_USD_PER_GPU_HOUR):
        raise DataError(
            f"{where}, field usd_per_gpu_hour: {x!r} must be >= {MIN_USD_PER_GPU_HOUR:g} and <= "
            f"{MAX_USD_PER_GPU_HOUR:g} (a price per GPU-hour)"
        )
    return entry


def _entry_from_mapping(
    gpu: str,
    tier: str,
    raw: Any,
    *,
    where: str,
    origin: str,
    sources: Mapping[str, Any],
    on_demand: float | None,
) -> PriceEntry:
    """Build one PriceEntry (see `_entry_unchecked`) and check its price."""
    entry = _entry_unchecked(gpu, tier, raw, where=where, origin=origin, sources=sources, on_demand=on_demand)
    return _check_price(entry, where)


def _entry_unchecked(
    gpu: str,
    tier: str,
    raw: Any,
    *,
    where: str,
    origin: str,
    sources: Mapping[str, Any],
    on_demand: float | None,
) -> PriceEntry:
    """Build one PriceEntry from a tier value: number, {usd_per_gpu_hour}, {quotes}, or owned fields."""
    ctx = _EntryContext(gpu=gpu, tier=tier, where=where, origin=origin, sources=sources, on_demand=on_demand)
    if isinstance(raw, int | float | str) and not isinstance(raw, bool):
        return ctx.entry(_number(raw, where=where, field="usd_per_gpu_hour"), source=ctx.default_source())
    if not isinstance(raw, Mapping):
        raise DataError(f"{where}: expected a number or a mapping with usd_per_gpu_hour, got {raw!r}")
    unknown = sorted(set(map(str, raw)) - _ENTRY_FIELDS)
    if unknown:
        raise DataError(
            f"{where}, field {unknown[0]}: unknown field; allowed: {', '.join(sorted(_ENTRY_FIELDS))}"
        )
    if any(raw.get(k) not in (None, "") for k in ("capex_usd", "amortization_years")):
        return _owned_entry(ctx, raw)
    if raw.get("usd_per_gpu_hour") not in (None, ""):
        return _direct_entry(ctx, raw)
    return _quoted_entry(ctx, raw)


@dataclass(frozen=True)
class _EntryContext:
    """Where one tier value sits in a price file, and what building its entry needs."""

    gpu: str
    tier: str
    where: str
    origin: str
    sources: Mapping[str, Any]
    on_demand: float | None

    def default_source(self) -> str:
        """The file and the entry's place in it, for a price that names no source."""
        return f"{self.origin} ({self.where.split(', ', 1)[-1]})"

    def entry(self, price: float, **fields: Any) -> PriceEntry:
        return PriceEntry(gpu=self.gpu, tier=self.tier, usd_per_gpu_hour=price, origin=self.origin, **fields)


def _owned_entry(ctx: _EntryContext, raw: Mapping[str, Any]) -> PriceEntry:
    """Owned hardware: the hourly cost of capex amortised plus power (see `OwnedCost`)."""
    owned = _owned(raw, ctx.where)
    src = str(raw.get("source") or ctx.default_source())
    note = str(raw.get("note") or "")
    return ctx.entry(owned.usd_per_gpu_hour, source=f"{src}; {owned.describe()}", owned=owned, note=note)


def _direct_entry(ctx: _EntryContext, raw: Mapping[str, Any]) -> PriceEntry:
    """One stated price, with its source (an id in `sources` or free text) and date."""
    price = _number(raw["usd_per_gpu_hour"], where=ctx.where, field="usd_per_gpu_hour")
    text, sdate = _sources_text(ctx.sources, raw.get("source"))
    date = str(raw.get("date") or sdate)
    src = (text or ctx.default_source()) + (f", {date}" if date else "")
    return ctx.entry(price, source=src, note=str(raw.get("note") or ""))


def _quoted_entry(ctx: _EntryContext, raw: Mapping[str, Any]) -> PriceEntry:
    """The median of several quotes (direct prices or published discounts on the on-demand price)."""
    quotes_raw = raw.get("quotes")
    if not quotes_raw:
        raise DataError(
            f"{ctx.where}, field usd_per_gpu_hour: missing value (give usd_per_gpu_hour, quotes, "
            "or owned-hardware fields capex_usd/amortization_years/power_kw/usd_per_kwh)"
        )
    if not isinstance(quotes_raw, list):
        raise DataError(f"{ctx.where}, field quotes: expected a list, got {type(quotes_raw).__name__}")
    quotes = tuple(_quote(ctx, q, f"{ctx.where}, quote {i}") for i, q in enumerate(quotes_raw, 1))
    med = statistics.median(q.usd_per_gpu_hour for q in quotes)
    source = f"{ctx.origin}: median of {_quote_kinds(quotes)}, {_quote_span(quotes)}"
    return ctx.entry(med, quotes=quotes, source=source, note=str(raw.get("note") or ""))


def _quote(ctx: _EntryContext, q: Any, qwhere: str) -> Quote:
    """One quote: a direct price, or a discount applied to the GPU's on-demand price (derived)."""
    if not isinstance(q, Mapping):
        raise DataError(f"{qwhere}: expected a mapping, got {q!r}")
    text, sdate = _sources_text(ctx.sources, q.get("source"))
    if not text:
        raise DataError(f"{qwhere}, field source: missing value (every quote needs a source)")
    common: dict[str, Any] = {
        "source": text,
        "date": str(q.get("date") or sdate or "undated"),
        "note": str(q.get("note") or ""),
    }
    if q.get("discount_vs_on_demand") is None:
        price = _number(q.get("usd_per_gpu_hour"), where=qwhere, field="usd_per_gpu_hour")
        return Quote(usd_per_gpu_hour=price, provider=str(q.get("provider") or ""), **common)
    d = _number(q["discount_vs_on_demand"], where=qwhere, field="discount_vs_on_demand", high=1.0)
    if ctx.on_demand is None:
        raise DataError(
            f"{qwhere}, field discount_vs_on_demand: {ctx.gpu} has no on_demand price to discount"
        )
    return Quote(
        usd_per_gpu_hour=ctx.on_demand * (1 - d), provider=f"on-demand x (1 - {d:g})", derived=True, **common
    )


def _quote_kinds(quotes: tuple[Quote, ...]) -> str:
    """'3 price quotes + 1 published discount applied to on-demand'."""
    n_direct = sum(not q.derived for q in quotes)
    n_disc = len(quotes) - n_direct
    parts = []
    if n_direct:
        parts.append(f"{n_direct} price quote{'s' * (n_direct != 1)}")
    if n_disc:
        parts.append(f"{n_disc} published discount{'s' * (n_disc != 1)} applied to on-demand")
    return " + ".join(parts)


def _quote_span(quotes: tuple[Quote, ...]) -> str:
    """The quotes' date range ('2025-01..2025-06'), one date, or 'undated'."""
    dates = sorted({q.date for q in quotes if q.date and q.date != "undated"}, key=_date_key)
    return f"{dates[0]}..{dates[-1]}" if len(dates) > 1 else (dates[0] if dates else "undated")


def _book_from_nested(
    data: Mapping[str, Any], *, path: str, origin: str, base_keys: Iterable[str]
) -> PriceBook:
    """Parse the nested form {gpus: {GPU: {tier: value}}} (or the same without the `gpus` key)."""
    sources = data.get("sources") or {}
    gpus = data.get("gpus", None)
    if gpus is None:
        gpus = {
            k: v for k, v in data.items() if k not in ("schema", "compiled", "sources", "aliases", "notes")
        }
    if not isinstance(gpus, Mapping):
        raise DataError(f"{_where(path, 'gpus')}: expected a mapping GPU -> tier -> price")
    entries: dict[tuple[str, str], PriceEntry] = {}
    # the built-in book may name its own keys; a user's file names catalog GPUs (or the books' keys): an
    # unknown name is an error with close matches, never an entry nothing will read
    keys = list(base_keys) + ([str(g) for g in gpus] if origin == "built-in" else [])
    seen: dict[str, str] = {}
    for gpu_raw, tiers in gpus.items():
        where_gpu = _where(path, f"entry {gpu_raw}")
        gpu = _gpu_key(gpu_raw, where_gpu, keys)
        if gpu in seen:
            raise DataError(f"{where_gpu}: {gpu} is priced twice (also as entry {seen[gpu]})")
        seen[gpu] = str(gpu_raw)
        if not isinstance(tiers, Mapping):
            raise DataError(f"{where_gpu}: expected a mapping tier -> price, got {tiers!r}")
        norm_tiers: dict[str, tuple[Any, Any]] = {}
        for tier_raw, raw in tiers.items():
            t = _tier(tier_raw, f"{where_gpu}.{tier_raw}")
            if t in norm_tiers:
                raise DataError(f"{where_gpu}: tier {t} given twice ({norm_tiers[t][0]!r} and {tier_raw!r})")
            norm_tiers[t] = (tier_raw, raw)
        # on_demand first: discounts refer to it
        order = sorted(norm_tiers, key=lambda t: TIERS.index(t))
        for t in order:
            tier_raw, raw = norm_tiers[t]
            od = entries.get((gpu, "on_demand"))
            entries[(gpu, t)] = _entry_from_mapping(
                gpu,
                t,
                raw,
                where=_where(path, f"entry {gpu_raw}.{tier_raw}"),
                origin=origin,
                sources=sources,
                on_demand=od.usd_per_gpu_hour if od else None,
            )
    aliases_raw = data.get("aliases") or {}
    if not isinstance(aliases_raw, Mapping):
        raise DataError(f"{_where(path, 'aliases')}: expected a mapping alias -> GPU")
    aliases = {str(a): str(t) for a, t in aliases_raw.items()}
    return PriceBook(entries=entries, aliases=aliases, files=() if origin == "built-in" else (path,))


def _book_from_rows(
    rows: Iterable[tuple[str, Mapping[str, Any]]], *, path: str, base_keys: Iterable[str]
) -> PriceBook:
    """Parse the flat form: rows with gpu, tier, usd_per_gpu_hour (or owned fields), source."""
    entries: dict[tuple[str, str], PriceEntry] = {}
    keys = list(base_keys)
    for row_label, raw in rows:
        where = _where(path, row_label)
        if not isinstance(raw, Mapping):
            raise DataError(f"{where}: expected a mapping with gpu, tier, usd_per_gpu_hour, got {raw!r}")
        gpu = _gpu_key(raw.get("gpu"), where, keys)
        is_owned = raw.get("capex_usd") not in (None, "")
        tier_raw = raw.get("tier")
        if tier_raw in (None, ""):
            if not is_owned:
                raise DataError(f"{where}, field tier: missing value; allowed: {', '.join(TIERS)}")
            tier_raw = "owned"
        t = _tier(tier_raw, where)
        if (gpu, t) in entries:
            raise DataError(f"{where}: a second price for {gpu} {t} (each GPU and tier once)")
        body = {k: v for k, v in raw.items() if k not in ("gpu", "tier") and v not in (None, "")}
        if not is_owned and "usd_per_gpu_hour" not in body:
            raise DataError(
                f"{where}, field usd_per_gpu_hour: missing value (or give owned-hardware fields "
                "capex_usd, amortization_years, power_kw, usd_per_kwh)"
            )
        entries[(gpu, t)] = _entry_from_mapping(
            gpu, t, body, where=where, origin=path, sources={}, on_demand=None
        )
        if "source" not in body and not is_owned:
            e = entries[(gpu, t)]
            entries[(gpu, t)] = replace(e, source=f"user prices {path}, {row_label}")
    return PriceBook(entries=entries, files=(path,))


def parse_price_text(text: str, path: str, fmt: str, *, base_keys: Iterable[str] = ()) -> PriceBook:
    """Parse price-file text (fmt 'yaml' or 'csv') into a PriceBook of the user's entries only."""
    if fmt == "csv":
        fieldnames, records = csv_rows(text, f"prices file {path}")
        header = [h.strip() for h in fieldnames]
        if not header:
            raise DataError(
                f"prices file {path}: empty CSV (expected header gpu,tier,usd_per_gpu_hour[,source])"
            )
        missing = [c for c in ("gpu",) if c not in header]
        if missing or not ({"tier", "usd_per_gpu_hour"} <= set(header) or "capex_usd" in header):
            raise DataError(
                f"prices file {path}, row 1 (header): columns {header} must include gpu, tier, "
                "usd_per_gpu_hour (or the owned-hardware columns capex_usd, amortization_years, "
                "power_kw, usd_per_kwh)"
            )
        unknown = [h for h in header if h not in _ENTRY_FIELDS - {"quotes"}]
        if unknown:
            raise DataError(
                f"prices file {path}, row 1 (header), field {unknown[0]}: unknown column; allowed: "
                f"{', '.join(sorted(_ENTRY_FIELDS - {'quotes'}))}"
            )
        rows = []
        for i, rec in enumerate(records, start=2):
            if None in rec:
                raise DataError(
                    f"prices file {path}, row {i}: more values than header columns: {rec[None]!r}"
                )
            clean = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in rec.items() if k}
            if not any(clean.values()):
                continue  # blank line
            rows.append((f"row {i}", clean))
        return _book_from_rows(rows, path=path, base_keys=base_keys)
    data = parse_yaml(text, f"prices file {path}")
    if data is None:
        raise DataError(f"prices file {path}: empty file")
    if isinstance(data, list):
        return _book_from_rows(
            ((f"row {i}", r) for i, r in enumerate(data, 1)), path=path, base_keys=base_keys
        )
    if not isinstance(data, Mapping):
        raise DataError(
            f"prices file {path}: expected a mapping or a list of rows, got {type(data).__name__}"
        )
    if "prices" in data:
        rows = data["prices"]
        if not isinstance(rows, list):
            raise DataError(f"prices file {path}, field prices: expected a list of rows")
        return _book_from_rows(
            ((f"row {i}", r) for i, r in enumerate(rows, 1)), path=path, base_keys=base_keys
        )
    return _book_from_nested(data, path=path, origin=path, base_keys=base_keys)


@functools.lru_cache(maxsize=1)
def default_price_book() -> PriceBook:
    """The built-in price book (autopar/data/prices.yaml), parsed once per process."""
    from autopar.catalog.loader import SAFE_LOADER  # libyaml when available: ~10x faster start-up

    text = BUILTIN_PRICES.read_text(encoding="utf-8")
    data = yaml.load(text, Loader=SAFE_LOADER)
    return _book_from_nested(data, path="autopar/data/prices.yaml", origin="built-in", base_keys=())


def load_price_book(path: str | Path | None = None) -> PriceBook:
    """Built-in prices overridden/extended by a user YAML or CSV file (None = built-in only)."""
    base = default_price_book()
    if path is None:
        return base
    p = Path(path)
    if not p.exists():
        raise DataError(f"prices file {p}: no such file")
    if p.is_dir():
        raise DataError(f"prices file {p}: is a directory, expected a .yaml/.yml/.csv file")
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".csv", ".json"):
        raise DataError(f"prices file {p}: unknown extension '{suffix}'; use .yaml, .yml, .json or .csv")
    fmt = "csv" if suffix == ".csv" else "yaml"  # JSON is valid YAML
    text = read_text(p, CONFIG_MAX_BYTES, "prices file")
    user = parse_price_text(text, str(p), fmt, base_keys=base.gpus())
    return base.merged(user)
