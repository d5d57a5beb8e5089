"""One price-resolution path: override > price book (catalog default on demand) > GPU spec > flat default.

Every outcome is named: a missing tier raises NoPriceError (never a silent fall-back to another tier), and
the flat default is reported as an assumption in the search's notes.
"""

from __future__ import annotations

import pytest

from autopar.catalog import get_gpu
from autopar.catalog.pricefile import default_price_book
from autopar.catalog.prices import FLAT_DEFAULT_USD_PER_GPU_HOUR, resolve_price
from autopar.errors import NoPriceError
from autopar.search import optimize
from autopar.search.evaluate import resolve_price as search_price
from autopar.specs import ClusterSpec, ModelSpec, Workload

BOOK = default_price_book()
CUSTOM = get_gpu("H100-SXM").model_copy(
    update={"name": "LabAccel-1", "aliases": (), "price_usd_per_hour": None}
)


def test_override_then_book_then_catalog():
    h100 = get_gpu("H100-SXM")
    assert resolve_price(h100, BOOK, "on_demand", override=1.5).origin == "override"
    r = resolve_price(h100, BOOK, "reserved")
    assert (r.origin, r.usd_per_gpu_hour) == ("price book", BOOK.price("H100-SXM", "reserved"))


def test_missing_tier_is_a_named_error_not_a_fallback():
    with pytest.raises(NoPriceError, match="no spot price for GPU 'GB200'"):
        resolve_price(get_gpu("GB200"), BOOK, "spot")
    cluster = ClusterSpec(gpu=get_gpu("GB200"), num_gpus=72)
    with pytest.raises(NoPriceError):  # the search's path is the same one
        search_price(cluster, BOOK, "spot")


def test_unknown_gpu_uses_its_spec_price_or_an_announced_assumption():
    priced = CUSTOM.model_copy(update={"price_usd_per_hour": 3.0})
    r = resolve_price(priced, BOOK)
    assert (r.origin, r.usd_per_gpu_hour) == ("gpu spec", 3.0)
    r = resolve_price(CUSTOM, BOOK)
    assert (r.origin, r.usd_per_gpu_hour) == ("assumed", FLAT_DEFAULT_USD_PER_GPU_HOUR)
    with pytest.raises(NoPriceError, match="no reserved price for GPU 'LabAccel-1'"):
        resolve_price(CUSTOM, BOOK, "reserved")


def test_search_says_when_a_price_is_assumed():
    tiny = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
    r = optimize(
        tiny,
        ClusterSpec(gpu=CUSTOM, num_gpus=4, gpus_per_node=4),
        Workload(seq_len=2048, global_batch=8),
        budget=10,
    )
    assert any(
        n.startswith("no price known for LabAccel-1: using the flat default $2.00/GPU-h") for n in r.notes
    )
