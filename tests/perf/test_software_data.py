"""autopar/data/software.yaml: the software-stack profiles as named data, validated on load.

Values hand-copied from the cited anchors in the file (Megatron's vocab-parallel loss ~6 B/logit, torchtitan's
fp32 logits and gradients ~12 B; torchtitan's per-op selective AC re-runs every other matmul: 0.5). Errors: one
line naming the file, the stack and the field.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from autopar.errors import DataError
from autopar.knobs import FRAMEWORKS
from autopar.perf.efficiency import software_for
from autopar.perf.software import SOFTWARE_FILE, parse_software

DOC = yaml.safe_load(SOFTWARE_FILE.read_text(encoding="utf-8"))


def test_named_values_reach_the_dataclass():
    mg, tt = software_for("megatron"), software_for("torchtitan")
    assert (mg.loss_bytes_per_logit, tt.loss_bytes_per_logit) == (6.0, 12.0)
    assert tt.selective_gemm_fraction == 0.5 and tt.torch_cp and not mg.torch_cp
    assert software_for("deepspeed").zero3_collectives_per_layer == 12
    assert isinstance(mg.zero3_collectives_per_layer, int) and isinstance(mg.elementwise_passes, float)
    assert not software_for("megatron-legacy").flash_attention
    # gradient accumulation: fused into Megatron's wgrad GEMM (0, a legal value); autograd's in-place add of
    # 2-byte gradients under Megatron-DeepSpeed (read accumulated + read new + write = 6 B)
    assert (mg.grad_accum_bytes, software_for("deepspeed").grad_accum_bytes) == (0.0, 6.0)
    assert tuple(parse_software(DOC, "software.yaml")) == FRAMEWORKS  # the registry's stacks, in its order


def _broken(stack: str, **change: object) -> dict:
    doc = copy.deepcopy(DOC)
    for k, v in change.items():
        if v is None:
            del doc["stacks"][stack][k]
        else:
            doc["stacks"][stack][k] = v
    return doc


@pytest.mark.parametrize(
    ("stack", "change", "expected"),
    [
        ("fsdp", {"zero3_overlapp": 0.5}, "stack 'fsdp': unknown field 'zero3_overlapp'"),
        ("fsdp", {"zero3_overlap": None}, "stack 'fsdp': missing field 'zero3_overlap'"),
        ("deepspeed", {"zero3_collectives_per_layer": 1.5}, "must be a positive integer, got 1.5"),
        ("megatron", {"tp_overlap_hidden": 1.2}, "field 'tp_overlap_hidden' must be a share in [0, 1]"),
        ("megatron", {"loss_bytes_per_logit": 0}, "field 'loss_bytes_per_logit' must be positive, got 0"),
        ("megatron", {"torch_cp": "no"}, "field 'torch_cp' must be true or false, got 'no'"),
        ("deepspeed", {"grad_accum_bytes": -1}, "field 'grad_accum_bytes' must be zero or positive, got -1"),
        ("torchtitan", {"elementwise_passes": "2"}, "field 'elementwise_passes' must be a number, got '2'"),
        ("torchtitan", {"description": " "}, "field 'description' must be a non-empty string"),
    ],
)
def test_bad_field_is_one_line_naming_file_stack_and_field(stack, change, expected):
    with pytest.raises(DataError) as e:
        parse_software(_broken(stack, **change), "software.yaml")
    msg = str(e.value)
    assert msg.startswith("software.yaml: ") and expected in msg and "\n" not in msg


def test_the_stacks_are_exactly_the_registrys():
    doc = copy.deepcopy(DOC)
    doc["stacks"]["jax"] = doc["stacks"]["fsdp"]
    with pytest.raises(DataError, match="unknown stack 'jax'"):
        parse_software(doc, "software.yaml")
    del doc["stacks"]["jax"], doc["stacks"]["deepspeed"]
    with pytest.raises(DataError, match="missing stack 'deepspeed'"):
        parse_software(doc, "software.yaml")
    with pytest.raises(DataError, match="top-level 'stacks:'"):
        parse_software({"stack": {}}, "software.yaml")
    with pytest.raises(DataError, match="unknown top-level key 'extra'"):
        parse_software({**DOC, "extra": 1}, "software.yaml")
