"""The price book: USD per GPU-hour by GPU and pricing tier, built-in and user-overridable.

Built-in prices live in ``autopar/data/prices.yaml`` (every tier backed by dated public quotes; the
tier price is their median). A user file (YAML or CSV, ``--prices``) overrides or adds entries: a
negotiated contract rate, or owned hardware priced from capex and power (see `OwnedCost`).

GPU names resolve through ``autopar.catalog.get_gpu`` (aliases, case-insensitive), so ``price("h100")``
and ``price("H100-SXM")`` find the same entry. `resolve_price` is the one path from a GPU (and an
optional cluster override) to a price with its source; a tier without a price raises `NoPriceError`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from autopar.errors import AutoparError, NoPriceError, UnknownNameError
from autopar.inputs import shown

if TYPE_CHECKING:
    from autopar.specs import GPUSpec

TIERS: tuple[str, ...] = ("on_demand", "reserved", "spot", "owned")
TIER_HELP = {
    "on_demand": "pay as you go, no commitment",
    "reserved": "committed capacity (1-3 year terms)",
    "spot": "interruptible / preemptible capacity",
    "owned": "your own hardware: amortised capex + power + overhead",
}
HOURS_PER_YEAR = 8760.0


def normalize_tier(tier: str) -> str:
    """Canonical tier name ('On-Demand' -> 'on_demand'); raises AutoparError for unknown tiers."""
    t = re.sub(r"[\s\-]+", "_", str(tier).strip().lower())
    t = {
        "ondemand": "on_demand",
        "od": "on_demand",
        "committed": "reserved",
        "preemptible": "spot",
        "interruptible": "spot",
    }.get(t, t)
    if t not in TIERS:
        raise AutoparError(f"tier={shown(tier)} is not a pricing tier; allowed: {', '.join(TIERS)}")
    return t


@dataclass(frozen=True)
class OwnedCost:
    """Owned hardware priced per useful GPU-hour.

    usd_per_gpu_hour = (capex_usd / (amortization_years * 8760) + overhead_usd_per_hour) / utilization
                       + power_kw * pue * usd_per_kwh

    - capex_usd: purchase cost per GPU, including its share of server, network and installation.
    - amortization_years: straight-line depreciation period (no residual value).
    - overhead_usd_per_hour: per-GPU wall-clock costs other than power (colocation/space, staff,
      support contracts, insurance).
    - utilization: fraction of wall-clock hours the GPU does paid-for work (0 < u <= 1); capex and
      overhead accrue every hour, so they are spread over the useful hours only.
    - power_kw: per-GPU share of the node's draw under load (GPU + host + network), kW.
    - pue: facility power usage effectiveness (>= 1; cooling and distribution losses).
    - usd_per_kwh: electricity price. Power is charged for useful hours only (idle draw ignored).
    """

    capex_usd: float
    amortization_years: float
    power_kw: float
    usd_per_kwh: float
    pue: float = 1.0
    utilization: float = 1.0
    overhead_usd_per_hour: float = 0.0

    @property
    def capex_per_hour(self) -> float:
        """Amortised capex per useful GPU-hour."""
        return self.capex_usd / (self.amortization_years * HOURS_PER_YEAR) / self.utilization

    @property
    def power_per_hour(self) -> float:
        """Electricity per useful GPU-hour (incl. PUE)."""
        return self.power_kw * self.pue * self.usd_per_kwh

    @property
    def overhead_per_hour(self) -> float:
        """Overhead per useful GPU-hour."""
        return self.overhead_usd_per_hour / self.utilization

    @property
    def usd_per_gpu_hour(self) -> float:
        """Effective USD per useful GPU-hour (formula in the class docstring)."""
        return self.capex_per_hour + self.overhead_per_hour + self.power_per_hour

    def describe(self) -> str:
        """One line: the inputs and the three cost terms."""
        return (
            f"owned: capex ${self.capex_usd:,.0f}/{self.amortization_years:g} y "
            f"-> ${self.capex_per_hour:.3f}/h, power {self.power_kw:g} kW x PUE {self.pue:g} x "
            f"${self.usd_per_kwh:g}/kWh -> ${self.power_per_hour:.3f}/h, overhead "
            f"${self.overhead_per_hour:.3f}/h, utilization {self.utilization:g}"
        )


@dataclass(frozen=True)
class Quote:
    """One public price observation behind a built-in tier price."""

    usd_per_gpu_hour: float
    provider: str
    source: str  # title and URL
    date: str
    note: str = ""
    derived: bool = False  # True when computed as on-demand x (1 - discount)


@dataclass(frozen=True)
class PriceEntry:
    """The price of one GPU in one tier, with where it came from."""

    gpu: str
    tier: str
    usd_per_gpu_hour: float
    source: str  # one-line provenance
    origin: str = "built-in"  # "built-in" or the user file path
    quotes: tuple[Quote, ...] = ()
    owned: OwnedCost | None = None
    note: str = ""
    # The GPU whose price this is when it was asked for another one through a price-book alias (H800 is
    # priced as H100-SXM, B300 as B200): never silent, `source` says so too. "" = the GPU's own price.
    borrowed_from: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (quotes included)."""
        return {
            "gpu": self.gpu,
            "tier": self.tier,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "source": self.source,
            "origin": self.origin,
            "borrowed_from": self.borrowed_from or None,
            "note": self.note or None,
            "owned": None if self.owned is None else self.owned.__dict__.copy(),
            "quotes": [q.__dict__.copy() for q in self.quotes],
        }


def norm_name(name: str) -> str:
    """Name folded for matching: lower case, letters and digits only ('H100-SXM' -> 'h100sxm')."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def catalog_names() -> list[str]:
    """Names of the catalog GPUs."""
    from autopar.catalog.loader import list_gpus

    return [g.name for g in list_gpus()]


@functools.lru_cache(maxsize=512)
def catalog_canonical(name: str) -> str | None:
    """The catalog's canonical name for `name`; None when the catalog does not know it."""
    gpu = catalog_gpu(name)
    return None if gpu is None else gpu.name


def catalog_gpu(name: str) -> GPUSpec | None:
    """The catalog GPUSpec for `name`, or None when the catalog does not know it."""
    from autopar.catalog.loader import get_gpu

    try:
        return get_gpu(name)
    except UnknownNameError:
        return None


@dataclass
class PriceBook:
    """USD per GPU-hour by (GPU, tier), with provenance; look-ups accept any catalog alias."""

    entries: dict[tuple[str, str], PriceEntry] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> GPU whose prices it uses
    files: tuple[str, ...] = ()  # user files merged in, in order

    # -- name resolution -------------------------------------------------------------------------
    def _known(self) -> dict[str, str]:
        """Normalised name -> book key, for GPUs with at least one entry."""
        return {norm_name(g): g for g, _ in self.entries}

    def resolve(self, gpu_name: str) -> str:
        """The book's key for a GPU name (catalog alias, case-insensitive, or price-book alias)."""
        known = self._known()
        for candidate in (gpu_name, catalog_canonical(gpu_name)):
            if candidate is None:
                continue
            if norm_name(candidate) in known:
                return known[norm_name(candidate)]
            for alias, target in self.aliases.items():
                if norm_name(alias) == norm_name(candidate) and norm_name(target) in known:
                    return known[norm_name(target)]
        canonical = catalog_canonical(gpu_name)
        if canonical is not None:
            return canonical  # a catalog GPU without a price-book entry (may have a catalog default)
        raise UnknownNameError("GPU", gpu_name, [g for g, _ in self.entries] + list(self.aliases))

    # -- queries ---------------------------------------------------------------------------------
    def entry(self, gpu_name: str, tier: str = "on_demand") -> PriceEntry:
        """The PriceEntry for a GPU and tier; AutoparError naming the tiers that exist if absent."""
        t = normalize_tier(tier)
        key = self.resolve(gpu_name)
        hit = self.entries.get((key, t))
        if hit is not None:
            return _borrowed(hit, catalog_canonical(gpu_name) or gpu_name)
        if t == "on_demand":
            spec = catalog_gpu(gpu_name)
            if spec is not None and spec.price_usd_per_hour is not None:
                return PriceEntry(
                    gpu=key,
                    tier=t,
                    usd_per_gpu_hour=float(spec.price_usd_per_hour),
                    source=f"catalog default price for {spec.name} ({CATALOG_PRICE_SOURCE})",
                    origin="catalog",
                )
        have = self.tiers(gpu_name)
        hint = f"tiers priced for {key}: {', '.join(have)}" if have else f"no price at all for {key}"
        raise NoPriceError(
            f"no {t} price for GPU '{key}' ({hint}); add one with --prices FILE "
            f"(YAML or CSV: gpu,tier,usd_per_gpu_hour)"
        )

    def price(self, gpu_name: str, tier: str = "on_demand") -> float:
        """USD per GPU-hour for a GPU in a pricing tier."""
        return self.entry(gpu_name, tier).usd_per_gpu_hour

    def source(self, gpu_name: str, tier: str = "on_demand") -> str:
        """Where the price of a GPU in a tier comes from (one line)."""
        return self.entry(gpu_name, tier).source

    def tiers(self, gpu_name: str) -> list[str]:
        """Tiers with a price for this GPU, in TIERS order."""
        try:
            key = self.resolve(gpu_name)
        except UnknownNameError:
            return []
        return [t for t in TIERS if (key, t) in self.entries]

    def gpus(self) -> list[str]:
        """GPUs with at least one price, sorted."""
        return sorted({g for g, _ in self.entries})

    def rows(self) -> list[PriceEntry]:
        """Every entry, sorted by GPU then tier order."""
        order = {t: i for i, t in enumerate(TIERS)}
        return sorted(self.entries.values(), key=lambda e: (e.gpu, order[e.tier]))

    # -- derivations -----------------------------------------------------------------------------
    def merged(self, other: PriceBook) -> PriceBook:
        """A new book: this one with every (GPU, tier) of `other` replacing or adding entries."""
        entries = dict(self.entries)
        entries.update(other.entries)
        return PriceBook(
            entries=entries, aliases={**self.aliases, **other.aliases}, files=self.files + other.files
        )

    def scaled(self, gpu_name: str, factor: float) -> PriceBook:
        """A new book with every tier of one GPU multiplied by `factor` (sensitivity analysis)."""
        key = self.resolve(gpu_name)
        entries = {
            k: (
                replace(e, usd_per_gpu_hour=e.usd_per_gpu_hour * factor, source=f"{e.source} x {factor:g}")
                if k[0] == key
                else e
            )
            for k, e in self.entries.items()
        }
        return PriceBook(entries=entries, aliases=dict(self.aliases), files=self.files)

    def with_price(
        self, gpu_name: str, tier: str, usd_per_gpu_hour: float, source: str = "set in code"
    ) -> PriceBook:
        """A new book with one price set (added or replaced)."""
        if not (usd_per_gpu_hour >= 0 and math.isfinite(usd_per_gpu_hour)):
            raise AutoparError(f"usd_per_gpu_hour={usd_per_gpu_hour!r} must be a finite number >= 0")
        t = normalize_tier(tier)
        try:
            key = self.resolve(gpu_name)
        except UnknownNameError:
            key = gpu_name
        entries = dict(self.entries)
        entries[(key, t)] = PriceEntry(
            gpu=key, tier=t, usd_per_gpu_hour=float(usd_per_gpu_hour), source=source, origin="code"
        )
        return PriceBook(entries=entries, aliases=dict(self.aliases), files=self.files)


def _borrowed(entry: PriceEntry, asked: str) -> PriceEntry:
    """`entry` as the price of `asked`: labelled borrowed when it is another GPU's (a price-book alias)."""
    if norm_name(asked) == norm_name(entry.gpu):
        return entry
    return replace(
        entry,
        borrowed_from=entry.gpu,
        source=f"borrowed from {entry.gpu} (no {asked} price in the book): {entry.source}",
    )


def provenance(entry: PriceEntry) -> str:
    """What kind of price an entry is: built-in price book, catalog default, a user price file, or code.
    A book-like object whose entries carry no origin (a stored study's prices) is "price book"."""
    origin = getattr(entry, "origin", None)
    if origin is None:
        return "price book"
    if origin == "built-in":
        return "built-in price book"
    if origin == "catalog":
        return "catalog default"
    if origin == "code":
        return "set in code"
    return f"price file {origin}"


# Where the catalog's flat `price_usd_per_hour` of a GPU comes from (autopar/catalog/data/gpus.yaml header).
CATALOG_PRICE_SOURCE = "gpus.yaml flat default: a mid-range specialist-cloud quote, early 2026"

# Last resort for a GPU nobody priced (a custom GPUSpec without price_usd_per_hour): an assumption the
# search says out loud in its notes ("flat default ..."), never silently. Roughly an A100/H100 spot price.
FLAT_DEFAULT_USD_PER_GPU_HOUR = 2.0


@dataclass(frozen=True)
class ResolvedPrice:
    """The price used for a GPU in a tier, and where it came from."""

    usd_per_gpu_hour: float
    source: str  # one line: the quote/file/override behind the number
    origin: str  # "override", "price book", "gpu spec" or "assumed"
    # Kind of source, for tables and JSON: "built-in price book", "catalog default", "price file PATH",
    # "set in code", "override", "gpu spec" or "assumed"; `tier` is the pricing tier it is a price in.
    provenance: str = ""
    tier: str = "on_demand"
    borrowed_from: str = ""  # the GPU whose price this is, when another GPU's (PriceEntry.borrowed_from)


def resolve_price(
    gpu: GPUSpec,
    book: PriceBook,
    tier: str = "on_demand",
    override: float | None = None,
    override_source: str = "cluster override",
) -> ResolvedPrice:
    """USD per GPU-hour for a GPU: override > price book (catalog default on demand) > spec > flat default.

    A GPU the book and catalog know but without a price in `tier` raises `NoPriceError` (never a silent
    fall-back to another tier); an unknown GPU uses its spec's price, else `FLAT_DEFAULT_USD_PER_GPU_HOUR`,
    with origin "assumed" so callers can say so.
    """
    t = normalize_tier(tier)
    if override is not None:
        return ResolvedPrice(float(override), override_source, "override", "override", t)
    try:
        entry = book.entry(gpu.name, t)
    except UnknownNameError:
        if gpu.price_usd_per_hour is not None and t == "on_demand":
            return ResolvedPrice(
                gpu.price_usd_per_hour, f"default price of the {gpu.name} spec", "gpu spec", "gpu spec", t
            )
        if t != "on_demand":
            raise NoPriceError(
                f"no {t} price for GPU '{gpu.name}' (not in the price book); add one with --prices FILE"
            ) from None
        flat = FLAT_DEFAULT_USD_PER_GPU_HOUR
        return ResolvedPrice(
            flat, f"flat default ${flat:.2f}/GPU-h (assumed; set one with --prices)", "assumed", "assumed", t
        )
    return ResolvedPrice(
        entry.usd_per_gpu_hour,
        entry.source,
        "price book",
        provenance(entry),
        t,
        getattr(entry, "borrowed_from", ""),  # a stored study's prices are plain (price, source) pairs
    )
