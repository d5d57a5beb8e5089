"""Strategy validation: every violated rule is reported, with the field and the numbers."""

from __future__ import annotations

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.errors import InvalidStrategyError
from autopar.perf import estimate, validate_strategy
from autopar.specs import ClusterSpec, Strategy, Workload

L70 = get_model("Llama-3.1-70B")
H100x64 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
W = Workload(seq_len=8192, global_batch=512)


def test_valid_strategy_has_no_violations():
    assert (
        validate_strategy(L70, H100x64, W, Strategy(tp=8, pp=4, vpp=5, pp_schedule="interleaved", sp=True))
        == []
    )


def test_every_rule_is_reported_at_once():
    v = validate_strategy(L70, H100x64, W, Strategy(tp=3, pp=3, cp=3, ep=2))
    text = " | ".join(v)
    assert "tp=3 does not divide heads=64" in text
    assert "kv_heads=8" in text
    assert "does not divide num_gpus=64" in text
    assert "layers=80 is not divisible by pp=3" in text
    assert "seq_len=8192 is not divisible by 2*cp = 6" in text
    assert "ep=2 needs an MoE model" in text


@pytest.mark.parametrize(
    "strategy,fragment",
    [
        (Strategy(tp=16), "exceeds the NVLink domain of 8 GPUs"),
        (
            Strategy(tp=8, pp=2, vpp=3, pp_schedule="interleaved"),
            "layers=80 is not divisible by pp*vpp = 2*3 = 6",
        ),
        (Strategy(tp=8, vpp=2, pp_schedule="interleaved"), "vpp=2 needs pp > 1"),
        (Strategy(tp=8, pp=2, pp_schedule="interleaved"), "interleaved needs vpp > 1"),
        (Strategy(tp=8, micro_batch=3), "global_batch=512 is not divisible by micro_batch*dp = 3*8 = 24"),
    ],
)
def test_single_rules(strategy: Strategy, fragment: str):
    assert any(fragment in v for v in validate_strategy(L70, H100x64, W, strategy))


def test_moe_rules():
    mix = get_model("Mixtral-8x7B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    assert validate_strategy(mix, cl, W, Strategy(tp=2, ep=8, sp=True)) == []
    assert any("ep=3 does not divide experts=8" in v for v in validate_strategy(mix, cl, W, Strategy(ep=3)))
    assert any("needs sequence parallelism" in v for v in validate_strategy(mix, cl, W, Strategy(tp=2, ep=4)))
    # expert mesh: tp*cp*dp = 2*1*32 = 64 must be divisible by ep*etp = 8*16
    assert any(
        "expert mesh" in v for v in validate_strategy(mix, cl, W, Strategy(tp=2, ep=8, etp=16, sp=True))
    )


def test_fp8_needs_fp8_hardware():
    a100 = ClusterSpec(gpu=get_gpu("A100-80GB"), num_gpus=64)
    v = validate_strategy(L70, a100, Workload(seq_len=4096, global_batch=64, precision="fp8"), Strategy(tp=8))
    assert any("FP8 tensor cores" in x for x in v)


def test_estimate_raises_with_all_violations():
    with pytest.raises(InvalidStrategyError) as ei:
        estimate(L70, H100x64, W, Strategy(tp=3))
    assert len(ei.value.violations) >= 3
    assert str(ei.value).startswith("invalid strategy: ")


def test_uneven_pipeline_allowed_when_not_strict():
    l405 = get_model("Llama-3.1-405B")  # 126 layers
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=512)
    st = Strategy(tp=8, pp=8, sp=True)
    assert any("not divisible by pp=8" in v for v in validate_strategy(l405, cl, W, st))
    e = estimate(l405, cl, W, st, strict=False)
    assert any("uneven pipeline split: 16 layers" in n for n in e.notes)


def test_logged_runs_may_bend_search_rules():
    # strict=False (run records): tp > kv_heads with replicated KV heads (a stack that shards them), TP across
    # nodes and interleaving with any micro-batch count are accepted; the search (strict) still rejects them.
    # Megatron-Core replicates KV heads itself (layouts.KV_REPLICATING_STACKS), so there tp16 breaks no KV rule.
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    st = Strategy(tp=16, pp=2, vpp=2, pp_schedule="interleaved", sp=True)
    w = Workload(seq_len=8192, global_batch=6)  # 3 micro-batches per step, not divisible by pp=2
    strict = " | ".join(validate_strategy(L70, cl, w, st))
    assert "kv_heads" not in strict and "NVLink domain" in strict and "divisible by pp=2" in strict
    tt = w.model_copy(update={"framework": "torchtitan"})
    assert "kv_heads=8" in " | ".join(validate_strategy(L70, cl, tt, st))
    assert not any("kv_heads" in v for v in validate_strategy(L70, cl, tt, st, strict=False))
    assert validate_strategy(L70, cl, w, st, strict=False) == []
    e = estimate(L70, cl, w, st, strict=False)
    assert e.time.tp_comm > 0 and e.step_time_s > 0
    # tp=3 with 8 KV heads is impossible either way (neither divides the other)
    assert any("kv_heads=8" in v for v in validate_strategy(L70, cl, w, Strategy(tp=3), strict=False))
