"""Strategy validation: every rule a (model, cluster, workload, strategy) combination must satisfy."""

from __future__ import annotations

from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload


def validate_strategy(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    strict: bool = True,
    allow_cross_node_tp: bool = False,
) -> list[str]:
    """Return every violated rule as a readable sentence ([] = valid).

    strict=False is for logged runs, which real frameworks allow to bend the search's rules: uneven pipeline
    stages, KV heads replicated when tp > kv_heads, TP across nodes, interleaving with any micro-batch count,
    MoE without sequence parallelism.
    """
    s = strategy
    out: list[str] = []
    W = cluster.num_gpus
    t, p, c, e = s.tp, s.pp, s.cp, s.ep
    mp = t * p * c
    if W % mp:
        out.append(f"tp*pp*cp = {t}*{p}*{c} = {mp} does not divide num_gpus={W}")
        d = max(1, W // mp)
    else:
        d = W // mp
    if s.dp and s.dp != d:
        out.append(f"dp={s.dp} but num_gpus/(tp*pp*cp) = {W}/{mp} = {d}")
    # Tensor parallel.
    if model.heads % t:
        out.append(f"tp={t} does not divide heads={model.heads}")
    if not model.is_mla and model.kv % t and (strict or t % model.kv):
        # strict=False accepts tp > kv_heads with the KV heads replicated across TP ranks (real runs do)
        out.append(f"tp={t} does not divide kv_heads={model.kv} (Megatron needs query groups % tp == 0)")
    if model.ffn_hidden % t and model.layers - model.moe_layers > 0:
        out.append(f"tp={t} does not divide ffn_hidden={model.ffn_hidden}")
    if t > cluster.node_size and not allow_cross_node_tp and strict:
        out.append(
            f"tp={t} exceeds the NVLink domain of {cluster.node_size} GPUs (TP across nodes is too slow)"
        )
    # Pipeline.
    v = s.vpp
    if p > model.layers:
        out.append(f"pp={p} exceeds layers={model.layers}")
    if v > 1:
        if p == 1:
            out.append(f"vpp={v} needs pp > 1")
        if s.pp_schedule != "interleaved":
            out.append(f"vpp={v} needs pp_schedule=interleaved (got {s.pp_schedule})")
        if model.layers % (p * v) and strict:
            out.append(f"layers={model.layers} is not divisible by pp*vpp = {p}*{v} = {p * v}")
        elif p * v > model.layers:
            out.append(f"pp*vpp = {p * v} exceeds layers={model.layers}")
    elif s.pp_schedule == "interleaved" and p > 1:
        out.append("pp_schedule=interleaved needs vpp > 1")
    if v == 1 and strict and model.layers % p:
        out.append(f"layers={model.layers} is not divisible by pp={p}")
    # Context parallel.
    if c > 1 and workload.seq_len % (2 * c):
        out.append(f"seq_len={workload.seq_len} is not divisible by 2*cp = {2 * c} (causal load balancing)")
    # Expert parallel.
    if e > 1 or s.etp not in (None, t):
        if not model.is_moe:
            out.append(f"ep={e} needs an MoE model ({model.name} is dense)")
        else:
            if model.experts % e:
                out.append(f"ep={e} does not divide experts={model.experts}")
            et = s.expert_tp
            if (t * c * d) % (e * et):
                out.append(f"expert mesh: tp*cp*dp = {t * c * d} is not divisible by ep*etp = {e * et}")
            if model.moe_ffn_hidden and model.moe_ffn_hidden % et:
                out.append(f"etp={et} does not divide moe_ffn_hidden={model.moe_ffn_hidden}")
    if model.is_moe and t > 1 and e > 1 and not s.sp and strict:
        out.append("MoE with tp>1 and ep>1 needs sequence parallelism (sp=true) in Megatron")
    # Batch.
    if workload.global_batch % (s.micro_batch * d):
        out.append(
            f"global_batch={workload.global_batch} is not divisible by micro_batch*dp = "
            f"{s.micro_batch}*{d} = {s.micro_batch * d}"
        )
    else:
        m = workload.global_batch // (s.micro_batch * d)
        if v > 1 and p > 1 and m % p and strict:
            out.append(f"interleaved schedule needs micro-batches per step ({m}) divisible by pp={p}")
    # Precision.
    if workload.precision == "fp8" and not cluster.gpu.fp8_flops:
        out.append(f"precision=fp8 needs a GPU with FP8 tensor cores ({cluster.gpu.name} has none)")
    return out
