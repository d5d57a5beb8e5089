"""A source's own cluster description sets its records' inter-node bandwidth (calibration/records/fabrics.py).

BLOOM's nodes (bigscience-workshop/bigscience train/tr11-176B-ml/README.md, "Hardware"): 8 A100 80GB GPUs and
4 Omni-Path links of 100 Gb/s each, so 4 x 100 / 8 / 8 bits = 6.25 GB/s per GPU per direction, a quarter of
the catalog's DGX A100 default (one 200 Gb/s NIC per GPU: 25 GB/s).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopar.calibration.records.fabrics import parse_internode_gbps, parse_source_fabrics, source_fabrics
from autopar.calibration.records.specs import row_to_specs
from autopar.catalog import get_gpu
from autopar.errors import DataError

ROW = {
    "id": "X", "model": "BLOOM-176B", "gpu": "A100-80GB", "num_gpus": 384, "gpus_per_node": 8, "tp": 4, "pp": 12,
    "seq_len": 2048, "global_batch": 2048, "micro_batch": 2, "precision": "bf16", "zero": 1,
    "framework": "Megatron-DeepSpeed (ZeRO-1)", "measured_tokens_per_s_per_gpu": 100.0,
}  # fmt: skip
JEAN_ZAY_GBPS = 4 * 100 / 8 / 8  # four 100 Gb/s links shared by eight GPUs, in GB/s


def test_bloom_sources_ran_on_four_omnipath_links_per_node():
    assert JEAN_ZAY_GBPS == 6.25
    for src in ("bloom176b", "bigscience_tr11_prequel"):
        assert source_fabrics()[src].internode_gbps == JEAN_ZAY_GBPS
        assert "OmniPath" in source_fabrics()[src].source


def test_record_of_a_described_source_gets_its_fabric_and_says_so():
    specs = row_to_specs({**ROW, "source": "bloom176b"})
    assert specs.cluster.nic_bw == pytest.approx(6.25e9)
    assert get_gpu("A100-80GB").scaleout_bw == pytest.approx(25e9)  # what it would have been
    assert any("internode_gbps=6.25" in a for a in specs.assumed)


def test_stated_column_wins_and_other_sources_keep_the_catalog_default():
    assert row_to_specs({**ROW, "source": "bloom176b", "internode_gbps": 12.5}).cluster.nic_bw == 12.5e9
    assert row_to_specs({**ROW, "source": "someone_else"}).cluster.nic_bw == 25e9


@pytest.mark.parametrize("bad", ["fast", 0, -3, "inf", True])
def test_bad_column_is_a_one_line_error_naming_it(bad):
    with pytest.raises(DataError, match="internode_gbps") as e:
        row_to_specs({**ROW, "source": "x", "internode_gbps": bad})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "top-level 'sources:'"),
        ({"sources": {"a": {"internode_gbps": 1.0}}}, "exactly the fields"),
        ({"sources": {"a": {"internode_gbps": 1.0, "source": " "}}}, "non-empty citation"),
        ({"sources": {"a": {"internode_gbps": -1, "source": "x"}}}, "positive number"),
    ],
)
def test_table_errors_name_the_entry(doc, message):
    with pytest.raises(DataError, match=message):
        parse_source_fabrics(doc, "t.yaml")


@given(st.floats(min_value=1e-3, max_value=1e4, allow_nan=False))
def test_any_positive_figure_round_trips(v):
    assert parse_internode_gbps("x", v) == v
    assert parse_internode_gbps("x", str(v)) == v
