"""autopar/data/efficiency.yaml: the per-family efficiency table as named data, validated on load.

Values: hand-copied from the cited anchors in the file (MAMF H100 795/989 = 80%, taken at 0.83 of MAMF in
training -> 0.66; MI300X 304 CUs). Errors: one line naming the file, the family and the field.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from autopar.errors import DataError
from autopar.perf.efficiency import EFFICIENCY_FILE, Efficiency, efficiency_for, families, parse_efficiency

DOC = yaml.safe_load(EFFICIENCY_FILE.read_text(encoding="utf-8"))


def test_named_values_reach_the_dataclass():
    h = efficiency_for("hopper")
    assert (h.gemm_max, h.gemm_max_fp8, h.sms, h.tile) == (0.66, 0.62, 132, 128)
    assert h.scaleup_latency_s == 3e-6 and isinstance(h.sms, int) and isinstance(h.hbm, float)
    assert efficiency_for("cdna3").sms == 304 and efficiency_for("cdna3").source == "MAMF MI300X 51%"
    assert families() == ["ampere", "blackwell", "cdna3", "cdna4", "davinci", "hopper"]


def test_unknown_family_gets_the_default_and_lookup_ignores_case():
    assert efficiency_for("no-such-family") is efficiency_for("hopper")
    assert efficiency_for("CDNA3") is efficiency_for("cdna3")


def test_inheriting_family_takes_only_its_own_overrides():
    e = parse_efficiency(DOC, "efficiency.yaml")
    assert e["davinci"] == Efficiency(**{**_fields(e["hopper"]), "sms": 24, "source": e["davinci"].source})
    assert e["cdna4"].gemm_max == e["cdna3"].gemm_max and e["cdna4"].sms == 256


def _fields(e: Efficiency) -> dict[str, object]:
    return {k: getattr(e, k) for k in Efficiency.__dataclass_fields__}


def _broken(family: str, **change: object) -> dict:
    doc = copy.deepcopy(DOC)
    for k, v in change.items():
        if v is None:
            del doc["families"][family][k]
        else:
            doc["families"][family][k] = v
    return doc


@pytest.mark.parametrize(
    ("family", "change", "expected"),
    [
        ("hopper", {"gemm_maxx": 0.6}, "family 'hopper': unknown field 'gemm_maxx'"),
        ("hopper", {"attn_bwd": None}, "family 'hopper': missing field 'attn_bwd'"),
        ("ampere", {"sms": 108.5}, "family 'ampere': field 'sms' must be an integer"),
        (
            "ampere",
            {"hbm": 1.5},
            "family 'ampere': field 'hbm' must be a fraction of peak in (0, 1], got 1.5",
        ),
        ("ampere", {"hbm": "0.8"}, "family 'ampere': field 'hbm' must be a number"),
        (
            "ampere",
            {"scaleup_latency_s": -1e-6},
            "field 'scaleup_latency_s' must be a positive number of seconds",
        ),
        ("cdna4", {"inherits": "cdna9"}, "family 'cdna4': inherits 'cdna9', not a family defined above it"),
        ("cdna4", {"source": ""}, "family 'cdna4': field 'source' must be a non-empty string"),
    ],
)
def test_bad_entry_is_one_line_naming_file_family_and_field(family, change, expected):
    with pytest.raises(DataError) as err:
        parse_efficiency(_broken(family, **change), "efficiency.yaml")
    msg = str(err.value)
    assert msg.startswith("efficiency.yaml: ") and expected in msg and "\n" not in msg


def test_document_shape_errors():
    with pytest.raises(DataError, match="expected a top-level 'families:' mapping"):
        parse_efficiency({"gpus": []}, "efficiency.yaml")
    with pytest.raises(DataError, match="unknown top-level key 'defaults'"):
        parse_efficiency({**DOC, "defaults": {}}, "efficiency.yaml")
    without_default = {
        "families": {k: v for k, v in DOC["families"].items() if k not in ("hopper", "davinci")}
    }
    with pytest.raises(DataError, match="missing family 'hopper'"):
        parse_efficiency(without_default, "efficiency.yaml")
