"""The price book: built-in data, name resolution, user overrides, owned hardware, validation."""

from __future__ import annotations

import re
import statistics

import pytest
import yaml

from autopar.catalog import list_gpus
from autopar.catalog.pricefile import BUILTIN_PRICES
from autopar.catalog.prices import TIERS
from autopar.costs import OwnedCost, default_price_book, load_price_book, normalize_tier
from autopar.errors import AutoparError, DataError


def test_every_catalog_gpu_has_on_demand_and_reserved_prices():
    book = default_price_book()
    for gpu in list_gpus():
        tiers = book.tiers(gpu.name)
        assert "on_demand" in tiers and "reserved" in tiers, gpu.name
        assert 0.3 < book.price(gpu.name) < 20, gpu.name


def test_builtin_entries_have_two_dated_public_sources_each():
    data = yaml.safe_load(BUILTIN_PRICES.read_text())
    sources = data["sources"]
    for sid, s in sources.items():
        assert s["url"].startswith("https://"), sid
        assert s["date"], sid
    for gpu, tiers in data["gpus"].items():
        for tier, entry in tiers.items():
            assert tier in TIERS
            refs = [q["source"] for q in entry["quotes"]]
            assert all(r in sources for r in refs), (gpu, tier)
            assert len(set(refs)) >= 2, f"{gpu} {tier} needs two distinct sources"
            assert all(q.get("date") for q in entry["quotes"]), (gpu, tier)


def test_tier_price_is_the_median_of_its_quotes():
    # H100-SXM on-demand quotes in prices.yaml: 3.99 2.95 3.49 6.155 3.90 3.00 6.98 3.00 3.24
    # sorted: 2.95 3.00 3.00 3.24 [3.49] 3.90 3.99 6.155 6.98 -> median 3.49
    book = default_price_book()
    assert book.price("H100-SXM") == pytest.approx(3.49)
    e = book.entry("H100-SXM", "on_demand")
    assert len(e.quotes) == 9 and "median of 9 price quotes" in e.source
    assert e.usd_per_gpu_hour == pytest.approx(statistics.median(q.usd_per_gpu_hour for q in e.quotes))


def test_discount_quotes_apply_to_on_demand():
    # H200 reserved = median(on_demand x (1-0.375), on_demand x (1-0.30)); on_demand median = 4.00
    # -> median(2.50, 2.80) = 2.65
    book = default_price_book()
    assert book.price("H200") == pytest.approx(4.00)
    assert book.price("H200", "reserved") == pytest.approx(2.65)
    assert all(q.derived for q in book.entry("H200", "reserved").quotes)


def test_names_resolve_through_catalog_aliases_and_case():
    book = default_price_book()
    assert book.price("h100") == book.price("H100-SXM") == book.price("hgx-h100")
    # the 96 GB / 500 W SKU is priced as an H100 (price-book alias)
    assert book.price("H100-SXM-96GB-500W", "reserved") == book.price("H100-SXM", "reserved")
    assert book.resolve("nvl72") == "GB200"


def test_unknown_gpu_and_tier_errors():
    book = default_price_book()
    with pytest.raises(AutoparError, match="unknown GPU 'H100-SMX'.*did you mean"):
        book.price("H100-SMX")
    with pytest.raises(AutoparError, match="tier='weekly'.*on_demand, reserved, spot, owned"):
        book.price("H100-SXM", "weekly")
    with pytest.raises(AutoparError, match="no spot price for GPU 'GB200'.*on_demand, reserved"):
        book.price("GB200", "spot")


def test_tier_aliases():
    assert normalize_tier("On-Demand") == "on_demand"
    assert normalize_tier("preemptible") == "spot"
    assert normalize_tier("committed") == "reserved"


def test_yaml_override_changes_exactly_the_entries_it_names(tmp_path):
    p = tmp_path / "my.yaml"
    p.write_text(
        "H100-SXM:\n  on_demand: 2.50\n  owned:\n    capex_usd: 40000\n    amortization_years: 4\n"
        "    power_kw: 1.275\n    usd_per_kwh: 0.10\n"
    )
    base, book = default_price_book(), load_price_book(p)
    assert book.price("H100-SXM") == 2.50
    assert str(p) in book.source("H100-SXM")
    changed = {k for k in book.entries if k not in base.entries or book.entries[k] != base.entries[k]}
    assert changed == {("H100-SXM", "on_demand"), ("H100-SXM", "owned")}
    assert book.price("H100-SXM", "reserved") == base.price("H100-SXM", "reserved")


def test_csv_override_and_row_form(tmp_path):
    p = tmp_path / "contract.csv"
    p.write_text(
        "gpu,tier,usd_per_gpu_hour,source\nh200,reserved,2.10,our 3-year contract\nB200,spot,1.99,\n"
    )
    book = load_price_book(p)
    assert book.price("H200", "reserved") == 2.10
    assert book.source("H200", "reserved").startswith("our 3-year contract")
    assert book.price("B200", "spot") == 1.99
    assert "row 3" in book.source("B200", "spot")
    assert book.price("H200") == default_price_book().price("H200")


def test_yaml_list_form(tmp_path):
    p = tmp_path / "rows.yaml"
    p.write_text("prices:\n  - {gpu: MI300X, tier: on-demand, usd_per_gpu_hour: 1.5, source: quote X}\n")
    assert load_price_book(p).price("MI300X") == 1.5


def test_owned_hardware_formula():
    # capex 40000 / (4 y * 8760 h) = 1.141553 $/h; / utilization 0.8 = 1.426941
    # overhead 0.20 / 0.8 = 0.25; power 1.275 kW * PUE 1.3 * $0.10 = 0.16575  -> 1.842691 $/GPU-h
    o = OwnedCost(
        capex_usd=40000,
        amortization_years=4,
        power_kw=1.275,
        usd_per_kwh=0.10,
        pue=1.3,
        utilization=0.8,
        overhead_usd_per_hour=0.20,
    )
    assert o.capex_per_hour == pytest.approx(1.426941, rel=1e-6)
    assert o.usd_per_gpu_hour == pytest.approx(1.842691, rel=1e-6)


def test_owned_row_in_csv(tmp_path):
    p = tmp_path / "owned.csv"
    p.write_text(
        "gpu,tier,usd_per_gpu_hour,capex_usd,amortization_years,power_kw,usd_per_kwh,pue,utilization,"
        "overhead_usd_per_hour\nH100-SXM,owned,,40000,4,1.275,0.10,1.3,0.8,0.20\n"
    )
    e = load_price_book(p).entry("H100", "owned")
    assert e.usd_per_gpu_hour == pytest.approx(1.842691, rel=1e-6)
    assert e.owned is not None and "capex" in e.source


def _err(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(DataError) as ei:
        load_price_book(p)
    return str(ei.value)


@pytest.mark.parametrize(
    "name, text, expected",
    [
        (
            "neg.csv",
            "gpu,tier,usd_per_gpu_hour\nH100-SXM,on_demand,-1\n",
            r"neg\.csv, row 2, field usd_per_gpu_hour: '-1' must be >= 0",
        ),
        (
            "missing.csv",
            "gpu,tier,usd_per_gpu_hour\nH100-SXM,on_demand,\n",
            r"missing\.csv, row 2, field usd_per_gpu_hour: missing value",
        ),
        (
            "tier.csv",
            "gpu,tier,usd_per_gpu_hour\nH100-SXM,weekly,2\n",
            r"tier\.csv, row 2, field tier: 'weekly' is not a pricing tier; allowed: on_demand",
        ),
        (
            "nan.csv",
            "gpu,tier,usd_per_gpu_hour\nH100-SXM,spot,cheap\n",
            r"nan\.csv, row 2, field usd_per_gpu_hour: 'cheap' is not a number",
        ),
        (
            "wide.csv",
            "gpu,tier,usd_per_gpu_hour\nH100-SXM,spot,1,extra\n",
            r"wide\.csv, row 2: more values than header",
        ),
        ("hdr.csv", "name,price\nH100,2\n", r"hdr\.csv, row 1 \(header\)"),
        (
            "gpu.csv",
            "gpu,tier,usd_per_gpu_hour\nH100-SMX,spot,1\n",
            r"gpu\.csv, row 2, field gpu: unknown GPU 'H100-SMX'; did you mean",
        ),
        (
            "neg.yaml",
            "H100-SXM:\n  reserved: -2\n",
            r"neg\.yaml, entry H100-SXM\.reserved, field usd_per_gpu_hour: -2 must be >= 0",
        ),
        (
            "tier.yaml",
            "H100-SXM:\n  hourly: 2\n",
            r"tier\.yaml, entry H100-SXM\.hourly, field tier: 'hourly'",
        ),
        (
            "field.yaml",
            "H100-SXM:\n  spot: {usd_per_gpu_hour: 1, vendor: x}\n",
            r"field\.yaml, entry H100-SXM\.spot, field vendor: unknown field",
        ),
        (
            "empty.yaml",
            "H100-SXM:\n  spot: {source: x}\n",
            r"empty\.yaml, entry H100-SXM\.spot, field usd_per_gpu_hour: missing",
        ),
        ("bad.yaml", "H100-SXM: [unclosed\n", r"bad\.yaml, line \d+: not valid YAML"),
        (
            "own.yaml",
            "H100-SXM:\n  owned: {capex_usd: 30000, amortization_years: 3}\n",
            r"own\.yaml, entry H100-SXM\.owned, field power_kw: missing value",
        ),
        (
            "util.yaml",
            "H100-SXM:\n  owned: {capex_usd: 1, amortization_years: 3, power_kw: 1, usd_per_kwh: 0.1, "
            "utilization: 1.5}\n",
            r"field utilization: 1\.5 must be <= 1",
        ),
        (
            "rows.yaml",
            "prices:\n  - {gpu: H200, usd_per_gpu_hour: 2}\n",
            r"rows\.yaml, row 1, field tier: missing value",
        ),
        ("p.txt", "x", r"unknown extension '\.txt'"),
    ],
)
def test_validation_errors_name_file_row_field_value(tmp_path, name, text, expected):
    msg = _err(tmp_path, name, text)
    assert re.search(expected, msg), msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_price_book(tmp_path / "nope.yaml")


def test_scaled_and_with_price_are_copies():
    book = default_price_book()
    up = book.scaled("H200", 1.2)
    assert up.price("H200", "reserved") == pytest.approx(1.2 * book.price("H200", "reserved"))
    assert up.price("B200") == book.price("B200")
    assert book.with_price("B200", "spot", 1.0).price("B200", "spot") == 1.0
    assert book.price("B200", "spot") == pytest.approx(2.25)  # unchanged original
