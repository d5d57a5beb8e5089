"""TP beyond the KV heads: Megatron-Core replicates them, other stacks shard them (layouts.KV_REPLICATING_STACKS).

Megatron-LM core_v0.17.1 / 0.18.2 / 0.19.0, megatron/core/transformer/transformer_config.py
`TransformerConfig.__post_init__` raises only when num_query_groups is neither a multiple nor a divisor of the TP
size, and attention.py `Attention.__init__` takes the `num_query_groups < world_size` branch (one KV head per rank,
its query heads kept). AWS's Qwen3-235B-A22B sweep (4 KV heads) ran TP8 on Megatron-Bridge, its measured best.
"""

from __future__ import annotations

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.layouts import Level, check, tp_degrees, tp_rules
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

QWEN = get_model("Qwen3-235B-A22B")  # 64 query heads, 4 KV heads
# Qwen3-235B's attention on a dense model: the FSDP stack runs MoE models without TP at all
# (layouts.FAMILY_LIMITS, tests/core/test_fsdp_moe_family.py), so the degrees the KV rule leaves are read on this
DENSE_KV4 = ModelSpec(
    name="dense-kv4", layers=8, hidden=4096, heads=64, kv_heads=4, ffn_hidden=12288, vocab=32000
)
H100 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)


def test_qwen3_has_four_kv_heads():
    assert (QWEN.heads, QWEN.kv) == (64, 4)


def test_megatron_accepts_tp_a_multiple_of_kv_heads():
    assert list(tp_rules(QWEN, H100, 8, False, "megatron")) == []
    assert 8 in tp_degrees(QWEN, H100, "megatron")


@pytest.mark.parametrize("framework", ["torchtitan", "megatron-legacy", "fsdp", "deepspeed"])
def test_other_stacks_keep_kv_heads_sharded(framework):
    (v,) = tp_rules(QWEN, H100, 8, False, framework)
    assert v.level == Level.STRICT and "kv_heads=4" in v.message and framework in v.message
    assert 8 not in tp_degrees(DENSE_KV4, H100, framework) and 4 in tp_degrees(DENSE_KV4, H100, framework)


def test_neither_multiple_nor_divisor_never_runs():
    m = ModelSpec(name="odd", layers=4, hidden=3072, heads=24, kv_heads=4, ffn_hidden=8192, vocab=32000)
    (v,) = [v for v in tp_rules(m, H100, 6, True, "megatron") if "kv_heads" in v.message]
    assert v.level == Level.HARD and "neither divides nor is a multiple of kv_heads=4" in v.message


def test_aws_measured_best_layout_is_valid_on_megatron():
    """AWSW-Q235 (bench/data/sweeps.csv): TP8+SP PP4 EP16 on 64 B300, the sweep's fastest layout."""
    b300 = ClusterSpec(gpu=get_gpu("B300"), num_gpus=64)
    s = Strategy(tp=8, sp=True, pp=4, dp=2, ep=16, etp=1, micro_batch=4, zero=1)
    w = Workload(seq_len=4096, global_batch=256, framework="megatron")
    assert [v for v in check(QWEN, b300, w, s) if "kv_heads" in v.message] == []
