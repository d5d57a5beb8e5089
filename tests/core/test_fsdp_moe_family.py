"""MoE models on the PyTorch-FSDP stack run as NeMo AutoModel's custom MoE (layouts.FAMILY_LIMITS): no TP, no
expert TP and Transformer Engine's ring as the only CP (nemo_automodel/components/moe/parallelizer.py at
037e04a: `assert tp_axis_name is None or world_mesh[tp_axis_name].size() == 1, "Tensor parallelism not
supported for custom MoE models"`; apply_ep is ExpertParallel alone; apply_cp sets cp_comm_type='p2p'). Dense
models on the same stack keep every axis."""

from __future__ import annotations

from autopar.catalog import get_gpu, get_model
from autopar.layouts import Level, check, cp_comm_values, model_family, tp_degrees
from autopar.search.space import build_space
from autopar.specs import ClusterSpec, Strategy, Workload

H100_64 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
FSDP = Workload(seq_len=4096, global_batch=512, framework="fsdp")


def test_moe_on_fsdp_offers_no_tp_no_expert_tp_and_only_the_ring() -> None:
    moe = get_model("qwen3-30b-a3b")
    assert model_family("fsdp", moe) == "custom_moe" and model_family("megatron", moe) is None
    assert tp_degrees(moe, H100_64, "fsdp") == [1]
    assert tp_degrees(moe, H100_64, "megatron")[:3] == [1, 2, 4]
    assert cp_comm_values(moe, H100_64, FSDP, 1, 2) == ("p2p",)
    space = build_space(moe, H100_64, FSDP)
    assert {lay.tp for lay in space.layouts} == {1}
    assert {lay.etp for lay in space.layouts} == {1}
    assert {c for lay in space.layouts for c in lay.cp_comm} == {"p2p"}


def test_a_refused_layout_names_the_source() -> None:
    moe = get_model("qwen3-30b-a3b")
    bad = Strategy(tp=2, sp=True, cp=2, cp_comm="allgather", ep=8, etp=2)
    msgs = [v.message for v in check(moe, H100_64, FSDP, bad, level=Level.HARD)]
    assert any(m.startswith("tp=2:") and "Tensor parallelism not supported for custom MoE" in m for m in msgs)
    assert any(m.startswith("cp_comm=allgather:") and "cp_comm_type='p2p'" in m for m in msgs)
    assert any(m.startswith("etp=2:") and "no expert tensor parallelism" in m for m in msgs)


def test_dense_models_on_fsdp_keep_every_axis() -> None:
    dense = get_model("llama3.1-8b")
    assert model_family("fsdp", dense) is None
    assert 8 in tp_degrees(dense, H100_64, "fsdp")
    assert cp_comm_values(dense, H100_64, FSDP, 1, 2) == ("p2p", "allgather")
    assert {lay.tp for lay in build_space(dense, H100_64, FSDP).layouts} >= {1, 2, 4, 8}
