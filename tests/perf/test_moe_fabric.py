"""MoE, NVLink-domain and FP8 mechanisms: hand-derived golden values and hypothesis invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.catalog.clusters import parse_cluster
from autopar.cli import app
from autopar.errors import AutoparError, SpecError
from autopar.perf import comm, count_params, estimate
from autopar.perf.fabric import fabric_of, placement
from autopar.perf.fp8 import cast_bytes_per_element
from autopar.perf.moe import a2a_bytes_per_token, routed_load, tokens_per_expert
from autopar.specs import ClusterSpec, Strategy, Workload

runner = CliRunner()


# ---- DeepSeek-V3 parameter split --------------------------------------------------------------------
def test_deepseek_v3_parameter_split():
    # By hand from deepseek-ai/DeepSeek-V3 config.json: h 7168, 61 layers (first 3 dense, ffn 18432),
    # 128 heads, MLA q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64, v 128; 256 routed experts of
    # 2048 (top-8) + 1 shared; vocab 129280, untied embeddings, RMSNorm.
    p = count_params(get_model("DeepSeek-V3"))
    # MLA per layer: q_down 7168*1536 = 11,010,048 + q_norm 1536 + q_up 1536*128*(128+64) = 37,748,736
    # + kv_down 7168*(512+64) = 4,128,768 + kv_norm 512 + kv_up 512*128*(128+128) = 16,777,216
    # + o 128*128*7168 = 117,440,512  ->  187,107,328
    assert p.attention == 187_107_328
    assert p.dense_mlp == 3 * 7168 * 18432 == 396_361_728
    assert p.expert == 3 * 7168 * 2048 == 44_040_192
    assert p.shared_expert == 44_040_192
    assert p.router == 7168 * 256 == 1_835_008
    assert p.embedding == p.output == 129280 * 7168 == 926_679_040
    # total = 61*(187,107,328 + 2*7168) + 2*926,679,040 + 7168 + 3*396,361,728
    #       + 58*(256*44,040,192 + 44,040,192 + 1,835,008) = 671,026,404,352
    assert p.total == 671_026_404_352
    # active replaces 256 routed experts by the top-8: 37,552,282,624
    assert p.active == 37_552_282_624
    # DeepSeek-V3 technical report (arXiv 2412.19437 §1): 671B total, 37B activated per token.
    assert p.total == pytest.approx(671e9, rel=0.001)
    assert p.active == pytest.approx(37e9, rel=0.02)


# ---- all-to-all volume ---------------------------------------------------------------------------------
def test_a2a_bytes_per_token_by_hand():
    # Each token sends top-k copies of h values; the 1/ep share for local experts stays on the rank.
    # top-8, h 7168, BF16 dispatch (2 B) + BF16 combine (2 B), ep 8: 8*7168*(2+2)*7/8 = 200,704 B.
    assert a2a_bytes_per_token(8, 7168, 8) == 200_704
    # FP8 dispatch (DeepSeek-V3 §3.3: FP8 dispatch, BF16 combine): 8*7168*(1+2)*7/8 = 150,528 B.
    assert a2a_bytes_per_token(8, 7168, 8, dispatch_bytes=1.0) == 150_528
    # Qwen3-235B-A22B, top-8, h 4096, ep 32: 8*4096*4*31/32 = 126,976 B.
    assert a2a_bytes_per_token(8, 4096, 32) == 126_976
    assert a2a_bytes_per_token(8, 7168, 1) == 0.0


def test_tokens_per_expert_and_load():
    # 4096 tokens, top-8 of 128 experts, ep 8 (16 local experts): each expert sees 4096*8*8/128 = 2048.
    assert tokens_per_expert(4096, 8, 128, 1, 8, 1, 1.0) == 2048
    # TP 2 with sequence parallelism halves what each rank routes; etp 2 all-gathers it back.
    assert tokens_per_expert(4096, 8, 128, 2, 8, 2, 1.0) == 2048
    assert routed_load(1.1, None) == 1.1
    assert routed_load(1.3, 1.0) == 1.0  # capacity factor caps (drops) the overflow


# ---- fabric: which link a group crosses -----------------------------------------------------------------
def _links(domain: int) -> comm.Links:
    return comm.Links(domain, 700e9, 42.5e9, 3e-6, 8e-6)


def test_tp8_ep8_in_nvl72_is_nvlink_but_nic_across_4_gpu_hosts():
    # TP8 (stride 1) and EP8 (stride 8, rank order tp-cp-ep-dp-pp) span 64 ranks: inside one 72-GPU
    # NVLink domain both stay on NVLink; with no domain beyond a 4-GPU host, TP is split 4+4 over two
    # hosts and every EP peer is on another host (NIC).
    assert fabric_of(8, 1, 72) == "nvlink" and fabric_of(8, 8, 72) == "nvlink"
    assert fabric_of(8, 1, 4) == "hierarchical" and placement(8, 1, 4) == (4, 2)
    assert fabric_of(8, 8, 4) == "nic" and placement(8, 8, 4) == (1, 8)
    S = 64e6  # bytes each rank sends in one all-to-all
    # NVLink: 7/8 of S leaves the rank over NVLink, plus one NVLink latency.
    assert comm.all_to_all(S, 8, 8, _links(72)) == pytest.approx(7 / 8 * S / 700e9 + 3e-6)
    # NIC: the same 7/8 of S over the per-GPU NIC, plus one NIC latency.
    assert comm.all_to_all(S, 8, 8, _links(4)) == pytest.approx(7 / 8 * S / 42.5e9 + 8e-6)


def test_gb200_cluster_domain_and_host():
    gb = get_gpu("GB200")
    c = ClusterSpec(gpu=gb, num_gpus=256)  # 256 is not a multiple of 72: the last rack is partial
    assert (c.node_size, c.host_size, c.nodes, c.domains) == (72, 4, 64, 4)
    assert ClusterSpec(gpu=gb, num_gpus=64, nvlink_domain=36).node_size == 36
    # A DGX H100 with 4-GPU hosts and no domain given: the domain is the host (backwards compatible).
    assert ClusterSpec(gpu=get_gpu("H100"), num_gpus=64, gpus_per_node=4).node_size == 4
    with pytest.raises(ValidationError, match="multiple of gpus_per_node"):
        ClusterSpec(gpu=gb, num_gpus=66)
    with pytest.raises(ValidationError, match="nvlink_domain=3"):
        ClusterSpec(gpu=gb, num_gpus=64, nvlink_domain=3)


def test_cluster_shorthands():
    s = parse_cluster("gb200-nvl72:4")
    assert (s.gpu, s.num_gpus, s.gpus_per_node, s.nvlink_domain) == ("GB200", 288, 4, 72)
    s = parse_cluster("dgx-h100:32")
    assert (s.gpu, s.num_gpus, s.gpus_per_node, s.nvlink_domain) == ("H100-SXM", 256, 8, 8)
    with pytest.raises(AutoparError, match="did you mean"):
        parse_cluster("gb200-nvl27:4")
    with pytest.raises(SpecError, match="COUNT"):
        parse_cluster("dgx-h100:0")


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--cluster", "gb200-nvl72:1", "--gpu", "H100"], "drop --gpu"),
        (["--cluster", "nope:1"], "unknown cluster"),
        (["--gpus", "64", "--nvlink-domain", "3"], "nvlink_domain=3"),
    ],
)
def test_cli_cluster_errors_are_one_line(args, msg):
    r = runner.invoke(app, ["estimate", "--no-calibration", *args])
    assert r.exit_code == 2
    assert msg in r.output and "Traceback" not in r.output


def test_cli_cluster_shorthand_estimates_on_the_rack():
    r = runner.invoke(
        app,
        ["estimate", "--model", "Qwen3-30B-A3B", "--cluster", "gb200-nvl72:1", "--ep", "8", "--json"]
        + ["--no-calibration", "--seq-len", "4096", "--global-batch", "72"],
    )
    assert r.exit_code == 0, r.output
    assert '"nvlink_domain": 72' in r.output and '"num_gpus": 72' in r.output


# ---- FP8 -----------------------------------------------------------------------------------------------------
def test_fp8_cast_bytes_by_recipe():
    # delayed tensor-wise: read bf16 (2) + write row-wise and column-wise FP8 (1 + 1) = 4 B per element;
    # current scaling adds the amax read (2); row-wise quantises each orientation separately (2 x 5);
    # MXFP8 reads once and writes both orientations with a 1-byte scale per 32 elements.
    assert cast_bytes_per_element("delayed") == 4.0
    assert cast_bytes_per_element("current") == 6.0
    assert cast_bytes_per_element("rowwise") == 10.0
    assert cast_bytes_per_element("mxfp8") == pytest.approx(2 + 2 * (1 + 1 / 32))


def test_mxfp8_needs_blackwell():
    m = get_model("Qwen3-30B-A3B")
    w = Workload(seq_len=4096, global_batch=64, precision="fp8", fp8_recipe="mxfp8")
    with pytest.raises(SpecError, match="Blackwell"):
        estimate(m, ClusterSpec(gpu=get_gpu("H100"), num_gpus=8), w, Strategy(ep=8), check=False)
    est = estimate(m, ClusterSpec(gpu=get_gpu("B200"), num_gpus=8), w, Strategy(ep=8), check=False)
    assert est.step_time_s > 0


def test_fp8_speeds_small_expert_gemms_less_than_dense_ones():
    # Fine-grained experts (Qwen3-30B-A3B: f_e 768) gain less from FP8 than a dense 8B model: the
    # quantisation traffic and the short-K penalty weigh more on small GEMMs.
    gpu = ClusterSpec(gpu=get_gpu("H100"), num_gpus=8)

    def speedup(model: str, s: Strategy) -> float:
        m = get_model(model)
        t = {
            p: estimate(m, gpu, Workload(seq_len=4096, global_batch=64, precision=p), s, check=False)
            for p in ("bf16", "fp8")
        }
        return t["bf16"].step_time_s / t["fp8"].step_time_s

    assert speedup("Qwen3-30B-A3B", Strategy(ep=8)) < speedup("Llama-3.1-8B", Strategy(zero=1))


# ---- invariants ----------------------------------------------------------------------------------------------
MOE = ["Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V2"]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(MOE), st.sampled_from([1, 2, 4]), st.sampled_from([(1, 2), (2, 4), (4, 8), (1, 8)]))
def test_more_ep_never_raises_expert_weight_memory(name, tp, eps):
    m = get_model(name)
    cl = ClusterSpec(gpu=get_gpu("H100"), num_gpus=64)
    w = Workload(seq_len=4096, global_batch=512)
    mem = [
        estimate(m, cl, w, Strategy(tp=tp, ep=e, etp=1, sp=tp > 1), check=False).memory.weights
        for e in eps
        if e <= m.experts
    ]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(mem, mem[1:], strict=False))


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["Qwen3-235B-A22B", "Mixtral-8x22B", "Llama-3.1-70B"]),
    st.sampled_from([(1, 8, 1), (2, 8, 1), (4, 16, 1), (8, 8, 2), (1, 32, 4), (2, 16, 2)]),
    st.sampled_from([(4, 8), (8, 36), (4, 72), (36, 72), (8, 16), (16, 64)]),
    st.sampled_from(["bf16", "fp8"]),
)
def test_larger_nvlink_domain_never_lowers_throughput(name, tep, domains, prec):
    m = get_model(name)
    tp, ep, pp = tep
    if not m.is_moe:
        ep = 1
    # 1152 GPUs fill whole domains of every size drawn (4..72): with a partial last domain a group can be
    # forced across a domain boundary unevenly (fewer NICs on the small side), a placement effect, not a
    # fabric one, that can cost a larger domain a fraction of a percent.
    w = Workload(seq_len=4096, global_batch=2304, precision=prec)
    s = Strategy(tp=tp, ep=ep, pp=pp, etp=1, sp=tp > 1)
    tps = [
        estimate(
            m, ClusterSpec(gpu=get_gpu("GB200"), num_gpus=1152, nvlink_domain=d), w, s, check=False
        ).tokens_per_s
        for d in domains
    ]
    assert tps[1] >= tps[0] * (1 - 1e-9)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--fp8-recipe", "current"], "needs --precision fp8"),
        (["--moe-imbalance", "1.0"], "applies to MoE models"),
        (
            ["--model", "Qwen3-30B-A3B", "--ep", "8", "--gpus", "8", "--precision", "fp8"]
            + ["--fp8-recipe", "mxfp8"],
            "needs a Blackwell GPU",
        ),
        (["--batch", "runs.csv", "--nvlink-domain", "72"], "cannot apply with --batch"),
    ],
)
def test_cli_workload_flag_errors(args, msg):
    r = runner.invoke(app, ["estimate", "--no-calibration", *args])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output


def test_balanced_routing_is_faster_than_imbalanced():
    m = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("H100"), num_gpus=8)
    s = Strategy(ep=8)
    t = [
        estimate(m, cl, Workload(seq_len=4096, global_batch=64, moe_imbalance=g), s, check=False).step_time_s
        for g in (1.0, 1.1, 1.3)
    ]
    assert t[0] < t[1] < t[2]
    capped = Workload(seq_len=4096, global_batch=64, moe_imbalance=1.3, moe_capacity_factor=1.0)
    assert estimate(m, cl, capped, s, check=False).step_time_s == pytest.approx(t[0])


def test_flex_dispatcher_sends_one_copy_per_domain_hit_own_included():
    from autopar.perf.moe import distinct_hits, flex_a2a_time

    # 8 copies over 4 equally likely NVLink domains: 4*(1-(3/4)^8) = 3.5996 distinct domains hit; the RDMA
    # stage carries each of them, the token's own domain included (DeepEP / HybridEP count it so):
    # 3.5996 rows per token at the NIC rate (alltoall: 8*24/32 = 6 remote rows).
    assert distinct_hits(4, 8) == pytest.approx(4 * (1 - 0.75**8))
    links = comm.Links(8, 1e30, 40e9, 0.0, 0.0)  # NVLink free: time = NIC rows only (+ 0.25 x 0)
    t = flex_a2a_time(1000, 8, 14336.0, 32, 1, links)
    assert t == pytest.approx(1000 * 4 * (1 - 0.75**8) * 14336.0 / 40e9)
    flat = comm.all_to_all(1000 * 8 * 14336.0, 32, 1, links)
    assert t / flat == pytest.approx(4 * (1 - 0.75**8) / 6)
    # Two domains, top-8: 2*(1-(1/2)^8) = 1.9922 rows, twice the remote-only 0.9961; an explicit RDMA rate.
    t2 = flex_a2a_time(1000, 8, 4096.0, 16, 1, links, rdma_bw=50e9)
    assert t2 == pytest.approx(1000 * 2 * (1 - 0.5**8) * 4096.0 / 50e9)
    # One NVLink domain (EP8, top-8): every rank hit, its own included: 8*(1-(7/8)^8) = 5.2508 rows at the
    # NVLink rate (DeepEP counts recv_x rows so: 153 GB/s measured on H800 ~ 0.78 x 200 GB/s).
    nvl = comm.Links(8, 156e9, 40e9, 0.0, 0.0)
    t3 = flex_a2a_time(1000, 8, 14336.0, 8, 1, nvl)
    assert t3 == pytest.approx(1000 * 8 * (1 - 0.875**8) * 14336.0 / 156e9)


def test_group_limited_routing_reaches_fewer_domains():
    from autopar.perf.moe import distinct_hits, domains_hit

    # DeepSeek-V3 (8 groups, 4 kept, top-8). EP64 over 8 domains: one group per domain, so the 8 experts
    # spread over the 4 kept groups hit 4*(1-(3/4)^8) = 3.5995 domains (unlimited: 8*(1-(7/8)^8) = 5.2511).
    assert domains_hit(8, 8, 8, 4) == pytest.approx(4 * (1 - 0.75**8))
    assert distinct_hits(8, 8) == pytest.approx(8 * (1 - 0.875**8))
    # Two domains of 4 groups: j kept groups in domain 0 ~ C(4,j)C(4,4-j)/70 = 1,16,36,16,1 /70, missed with
    # (1-j/4)^8: miss = (1 + 16*0.75^8 + 36*0.5^8 + 16*0.25^8)/70 = 0.039181, hit 2*(1-miss) = 1.92164.
    miss = (1 + 16 * 0.75**8 + 36 * 0.5**8 + 16 * 0.25**8) / 70
    assert domains_hit(2, 8, 8, 4) == pytest.approx(2 * (1 - miss))
    # Groups that straddle domains (8 groups over 3), no groups, or all groups kept: unlimited routing.
    assert domains_hit(3, 8, 8, 4) == distinct_hits(3, 8)
    assert domains_hit(4, 8) == domains_hit(4, 8, 8, 8) == distinct_hits(4, 8)


@settings(max_examples=80, deadline=None)
@given(
    k=st.sampled_from([2, 4, 8, 16, 32]),
    topk=st.integers(1, 16),
    per=st.integers(1, 4),
    data=st.data(),
)
def test_group_limit_never_adds_domains(k: int, topk: int, per: int, data):
    from autopar.perf.moe import distinct_hits, domains_hit

    groups = k * per
    group_topk = data.draw(st.integers(1, groups))
    d = domains_hit(k, topk, groups, group_topk)
    assert 0.0 < d <= distinct_hits(k, topk) + 1e-9
    assert d <= min(k, group_topk, topk) + 1e-9


def test_flex_rdma_bandwidth_by_transport():
    from autopar.perf.moe import flex_rdma_bandwidth

    # InfiniBand / RoCE: the NIC line rate; EFA (NVSHMEM libfabric host proxy): DeepEP's measured share on
    # p5.48xlarge, mean of 43.7, 46.1, 39.6, 39.2 GB/s over 50 GB/s = 0.843 -> 0.84.
    assert flex_rdma_bandwidth(50e9, "infiniband") == 50e9
    assert flex_rdma_bandwidth(50e9, "roce") == 50e9
    assert pytest.approx(0.84, abs=0.005) == (43.7 + 46.1 + 39.6 + 39.2) / 4 / 50
    assert flex_rdma_bandwidth(50e9, "efa") == pytest.approx(42e9)


def test_efa_proxy_bandwidth_scales_with_row_width():
    from autopar.perf.moe import EFA_PROXY_REF_ROW_BYTES, flex_rdma_bandwidth

    # The EFA share was measured with BF16 rows of hidden 7168 (14,336 bytes); DeepEP puts one message per
    # chunk of tokens, so on the host proxy a row half as wide moves at half the bandwidth, a wider one at no
    # more than the measured share. By hand: Qwen3-30B (hidden 2048, BF16: 4,096 bytes) on 50 GB/s of EFA
    # gets 0.84 x 50 x 4096 / 14336 = 12.0 GB/s; Qwen3-235B (hidden 4096) 24.0 GB/s; DeepSeek-V3 (7168) 42.
    assert EFA_PROXY_REF_ROW_BYTES == 14336.0
    assert flex_rdma_bandwidth(50e9, "efa", 4096.0) == pytest.approx(12.0e9)
    assert flex_rdma_bandwidth(50e9, "efa", 8192.0) == pytest.approx(24.0e9)
    assert flex_rdma_bandwidth(50e9, "efa", 14336.0) == pytest.approx(42.0e9)
    assert flex_rdma_bandwidth(50e9, "efa", 4 * 14336.0) == pytest.approx(42.0e9)
    # IBGDA transports put from the GPU: no proxy, the row width does not matter.
    assert (
        flex_rdma_bandwidth(50e9, "infiniband", 4096.0) == flex_rdma_bandwidth(50e9, "roce", 4096.0) == 50e9
    )


@settings(max_examples=40, deadline=None)
@given(row=st.floats(16.0, 1e5), wider=st.floats(1.0, 8.0), nic=st.floats(1e9, 1e11))
def test_efa_proxy_bandwidth_monotone(row: float, wider: float, nic: float):
    from autopar.perf.moe import flex_rdma_bandwidth

    narrow, wide = flex_rdma_bandwidth(nic, "efa", row), flex_rdma_bandwidth(nic, "efa", row * wider)
    assert 0.0 < narrow <= wide <= flex_rdma_bandwidth(nic, "efa") <= flex_rdma_bandwidth(nic, "infiniband")


def _q30(transport: str, dispatcher: str) -> float:
    m = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64, transport=transport)
    w = Workload(seq_len=4096, global_batch=256, moe_dispatcher=dispatcher)
    s = Strategy(tp=2, pp=2, ep=32, etp=1, micro_batch=4, recompute="none", zero=1, vpp=1)
    return estimate(m, cl, w, s, check=False).step_time_s


def test_efa_slows_only_the_flex_dispatcher():
    # NCCL all-to-all (aws-ofi-nccl) keeps the NIC rate on EFA; DeepEP's host-proxy RDMA stage gets 0.84 of it.
    assert _q30("efa", "alltoall") == _q30("infiniband", "alltoall") == _q30("roce", "alltoall")
    assert _q30("efa", "flex") > _q30("infiniband", "flex") == _q30("roce", "flex")


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.floats(1.0, 1e5),
    topk=st.integers(1, 16),
    size=st.sampled_from([2, 4, 8, 16, 32, 64, 128]),
    scaleup=st.floats(50e9, 2e12),
)
def test_flex_time_invariants(tokens: float, topk: int, size: int, scaleup: float):
    from autopar.perf.moe import distinct_hits, flex_a2a_time, flex_rdma_bandwidth

    # EFA never speeds a dispatch up; the RDMA stage (own domain counted) never takes less than the remote
    # rows alone at the same rate; inside one domain the NIC plays no part.
    links = comm.Links(8, scaleup, 42.5e9, 3e-6, 8e-6)
    ib = flex_a2a_time(tokens, topk, 4096.0, size, 1, links, flex_rdma_bandwidth(50e9, "infiniband"))
    efa = flex_a2a_time(tokens, topk, 4096.0, size, 1, links, flex_rdma_bandwidth(50e9, "efa"))
    assert efa >= ib > 0.0
    _, k = comm.placement(size, 1, 8)
    remote_only = tokens * distinct_hits(k, topk) * (k - 1) / k * 4096.0 / 50e9
    assert ib >= remote_only
    if size <= 8:
        assert efa == ib


def test_cluster_transport_input():
    # The AWS shorthands say EFA; a bad --transport is a one-line error; unstated = InfiniBand.
    shape = parse_cluster("p5:2")
    assert (shape.gpu, shape.num_gpus, shape.transport) == ("H100-SXM", 16, "efa")
    assert parse_cluster("p6-b300:4").transport == "efa"
    assert parse_cluster("dgx-h100:2").transport is None
    assert ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16).transport == "infiniband"
    with pytest.raises(ValidationError):
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16, transport="ib")
    from autopar.problem import ClusterConfig

    assert ClusterConfig(system="p5:2").build_one().transport == "efa"
    assert ClusterConfig(system="dgx-h100:2").build_one().transport == "infiniband"
    assert ClusterConfig(system="p5:2", transport="infiniband").build_one().transport == "infiniband"
    assert ClusterConfig(gpu="H100-SXM", gpus="16", transport="RoCE").build_one().transport == "roce"
    clusters, _ = ClusterConfig(system="p5:2", transport="efa").build()
    assert [c.transport for c in clusters] == ["efa"]
    with pytest.raises(SpecError, match="transport='ib': expected one of infiniband, roce, efa"):
        ClusterConfig(gpu="H100-SXM", gpus="16", transport="ib").build_one()
    res = runner.invoke(app, ["estimate", "--model", "Llama-3.1-8B", "--gpus", "16", "--transport", "ib"])
    assert res.exit_code != 0 and "expected one of infiniband, roce, efa" in res.output


def test_record_rows_state_the_transport():
    from autopar.calibration.records.specs import row_to_specs

    base = {
        "id": "X",
        "model": "Qwen3-30B-A3B",
        "gpu": "H100-SXM",
        "num_gpus": 16,
        "seq_len": 4096,
        "global_batch": 64,
        "tp": 1,
        "pp": 1,
        "ep": 16,
        "micro_batch": 1,
        "precision": "bf16",
        "framework": "Megatron-Core",
    }
    assert row_to_specs(base).cluster.transport == "infiniband"
    noted = row_to_specs({**base, "notes": "fabric: AWS EFA, transport=efa"})
    assert noted.cluster.transport == "efa" and any("transport=efa" in a for a in noted.assumed)
    assert row_to_specs({**base, "transport": "roce", "notes": "transport=efa"}).cluster.transport == "roce"
    with pytest.raises(AutoparError, match="transport"):
        row_to_specs({**base, "transport": "myrinet"})


def test_ep_overlap_and_cuda_graphs_only_speed_up():
    m = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("B200"), num_gpus=16)
    s = Strategy(ep=16, micro_batch=1)
    base = Workload(seq_len=4096, global_batch=64, precision="fp8")
    t0 = estimate(m, cl, base, s, check=False).step_time_s
    for upd in ({"moe_ep_overlap": True}, {"cuda_graphs": True}, {"moe_dispatcher": "flex"}):
        assert estimate(m, cl, base.model_copy(update=upd), s, check=False).step_time_s <= t0


def test_cpu_issue_floor_binds_only_short_layers():
    from autopar.perf.efficiency import HOST_OP_S, host_issue_time

    # ~30 ops forward and 2x backward for a dense layer at 20 us each: 0.6 ms + 1.2 ms.
    assert host_issue_time(False, 0) == pytest.approx((30 * HOST_OP_S, 60 * HOST_OP_S))
    tiny = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("B200"), num_gpus=8)
    w = Workload(seq_len=512, global_batch=8, precision="fp8")
    s = Strategy(ep=8)
    eager = estimate(tiny, cl, w, s, check=False).step_time_s
    graphed = estimate(tiny, cl, w.model_copy(update={"cuda_graphs": True}), s, check=False).step_time_s
    assert eager > graphed  # 512-token micro-batches are launch-bound without CUDA graphs
    big = Workload(seq_len=8192, global_batch=64)
    llama = get_model("Llama-3.1-70B")
    c64 = ClusterSpec(gpu=get_gpu("H100"), num_gpus=64)
    st8 = Strategy(tp=8, pp=2, sp=True)
    assert (
        estimate(llama, c64, big, st8, check=False).step_time_s
        == estimate(llama, c64, big.model_copy(update={"cuda_graphs": True}), st8, check=False).step_time_s
    )


def test_optimize_qwen3_235b_on_64_gb200_feasible_and_domain_aware():
    import time

    from autopar.search.study import optimize

    m = get_model("Qwen3-235B-A22B")
    w = Workload(seq_len=4096, global_batch=1024, precision="fp8")
    t0 = time.perf_counter()
    rack = optimize(m, ClusterSpec(gpu=get_gpu("GB200"), num_gpus=64), w, budget=80, seed=0)
    assert time.perf_counter() - t0 < 60
    assert not rack.pareto.empty and (rack.pareto["headroom"] >= 0).all()
    # The same 64 GPUs without the rack-wide NVLink domain (4-GPU trays on the NIC only) train slower.
    trays = optimize(m, ClusterSpec(gpu=get_gpu("GB200"), num_gpus=64, nvlink_domain=4), w, budget=80, seed=0)
    assert trays.pareto["throughput"].max() < rack.pareto["throughput"].max()


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--cluster", "gb200-nvl36:1", "-o", "H100:8"], "drop --option"),
        ([], "give --option GPU:COUNT"),
        (["--cluster", "dgx-h100:2", "--nvlink-domain", "4"], "drop --nvlink-domain"),
    ],
)
def test_whatif_cluster_errors(args, msg):
    r = runner.invoke(app, ["whatif", "-m", "Qwen3-30B-A3B", "-t", "1T", "--no-calibration", *args])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4096), st.sampled_from([768, 1536, 2048]), st.sampled_from([8, 16, 32]))
def test_grouped_gemm_efficiency_falls_with_fewer_tokens_per_expert(m, fe, groups):
    from autopar.perf.context import perf_context
    from autopar.perf.moe import grouped_gemm

    ctx = perf_context(
        get_model("Qwen3-30B-A3B"),
        ClusterSpec(gpu=get_gpu("H100"), num_gpus=8),
        Workload(seq_len=4096, global_batch=8),
    )

    def rate(rows: int) -> float:  # FLOP/s of the grouped GEMM
        return 2.0 * rows * fe * 2048 * groups / grouped_gemm(ctx, rows, fe, 2048, groups, False)

    assert rate(m) <= rate(2 * m) * (1 + 1e-9)


def test_clusters_json_lists_the_nvl72_rack():
    # GB200 NVL72: 72 GPUs in one NVLink domain, 4 GPUs per compute tray (NVIDIA GB200 NVL72 data sheet).
    import json

    r = runner.invoke(app, ["clusters", "--json"])
    assert r.exit_code == 0, r.output
    nvl72 = {d["name"]: d for d in json.loads(r.output)}["gb200-nvl72"]
    assert (nvl72["nvlink_domain"], nvl72["gpus_per_node"], nvl72["unit_gpus"]) == (72, 4, 72)
