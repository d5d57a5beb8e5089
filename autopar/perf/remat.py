"""MaxText's remat policies as recompute modes: what each saves per decoder layer, and what it re-runs.

MaxText wraps every decoder layer in jax.checkpoint with the policy its `remat_policy` config names
(google/maxtext MaxText/layers/decoders.py `Decoder.get_remat_policy`): a policy keeps the outputs tagged with
checkpoint_name in the layer (attentions.py 'query_proj', 'key_proj', 'value_proj', 'out_proj', 'context';
linears.py 'mlpwi', 'mlpwo') that it names, and the backward re-runs the rest of the layer's forward. 'minimal'
kept every matmul output without a batch dimension (jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims
until maxtext 6426085eb, 2025-08-20; since then the same tensors by name); the '*_offloaded' policies move the
saved tensors to pinned host memory (offload_dot_with_no_batch_dims / save_and_offload_only_these_names);
'full' (and 'none', which still wraps the layer with no policy) keeps only the layer's input: autopar's "full".
Bytes per token per layer for a dense layer (bf16, TP t): input 2h/t_sp, q/k/v 2d(a + 2k)/t, out_proj 2h/t,
mlpwi (gate and up) 4f/t, mlpwo 2h/t, context 2ad/t plus the fp32 log-sum-exp 4a/t (the cuDNN flash path).
"""

from __future__ import annotations

from dataclasses import dataclass

REMAT_PREFIX = "remat:"
# The tensors a policy may keep (beyond the layer's input, which every checkpoint keeps).
SAVABLE = ("qkv", "out_proj", "mlpwi", "mlpwo", "context")


@dataclass(frozen=True, slots=True)
class RematPolicy:
    """What a MaxText remat policy keeps on the GPU per decoder layer."""

    saves: frozenset[str]
    offloaded: bool = False  # the saved tensors live in host memory (only the layer input stays)


# maxtext MaxText/layers/decoders.py `get_remat_policy` (tag/commit cited in the module docstring).
REMAT_POLICIES: dict[str, RematPolicy] = {
    "minimal": RematPolicy(frozenset({"qkv", "out_proj", "mlpwi", "mlpwo"})),
    "minimal_with_context": RematPolicy(frozenset({"qkv", "out_proj", "mlpwi", "mlpwo", "context"})),
    "save_dot_with_context_except_mlp": RematPolicy(frozenset({"qkv", "out_proj", "context"})),
    "save_dot_except_mlpwi": RematPolicy(frozenset({"qkv", "out_proj", "mlpwo"})),
    "save_dot_except_mlp": RematPolicy(frozenset({"qkv", "out_proj"})),
    "save_qkv_proj": RematPolicy(frozenset({"qkv"})),
    "save_out_proj": RematPolicy(frozenset({"out_proj"})),
    "qkv_proj_offloaded": RematPolicy(frozenset({"qkv"}), offloaded=True),
    "minimal_offloaded": RematPolicy(frozenset({"qkv", "out_proj", "mlpwi", "mlpwo"}), offloaded=True),
}
# MaxText's policies that keep nothing but the layer input: autopar's full recompute.
FULL_REMAT_NAMES = ("full", "none")
REMAT_MODES: tuple[str, ...] = tuple(REMAT_PREFIX + name for name in REMAT_POLICIES)


def remat_policy(rec: str) -> RematPolicy | None:
    """The policy of a recompute mode ('remat:NAME'), None for the other modes."""
    return REMAT_POLICIES.get(rec.removeprefix(REMAT_PREFIX)) if rec.startswith(REMAT_PREFIX) else None


def kept_on_gpu(rec: str) -> frozenset[str]:
    """The savable tensors a remat mode keeps in GPU memory (empty when offloaded or not a remat mode)."""
    pol = remat_policy(rec)
    return frozenset() if pol is None or pol.offloaded else pol.saves


def recomputed_gemm_shares(rec: str, qkv_share: float, mlpwi_share: float) -> tuple[float, float]:
    """(share of the attention projections' GEMM time, share of the MLP GEMM time) the backward re-runs under a
    remat mode: the projections whose outputs the policy does not keep (offloaded ones are kept: copied back,
    not recomputed). `qkv_share`: QKV's share of the attention projections (the rest is out_proj);
    `mlpwi_share`: gate/up's share of the MLP (the rest is mlpwo)."""
    pol = remat_policy(rec)
    saved = pol.saves if pol else frozenset()
    attn = (0.0 if "qkv" in saved else qkv_share) + (0.0 if "out_proj" in saved else 1.0 - qkv_share)
    mlp = (0.0 if "mlpwi" in saved else mlpwi_share) + (0.0 if "mlpwo" in saved else 1.0 - mlpwi_share)
    return attn, mlp


# ------------------------------------------------------------------------ spreading full recompute over layers
# How full recompute is spread over a pipeline rank's layers (Workload.recompute_method / recompute_num_layers):
# - uniform N: Megatron --recompute-method uniform --recompute-num-layers N (megatron/core/transformer/
#   transformer_block.py `_checkpointed_forward`): the layers go in chunks of N, each chunk checkpointed as one,
#   so the rank keeps the input of every N-th layer and re-runs a whole chunk (N layers' working set) at once;
# - block N: the first N layers of each model chunk (virtual stage) are checkpointed, the rest keep everything
#   (recompute share N / (layers per chunk));
# - every_nth N: torchtitan's per-layer selective AC (selective_ac_option = N, torchtitan v0.2.2
#   activation_checkpoint.py `_apply_ac_to_transformer_block`): every N-th block wrapped in a full checkpoint,
#   the others keep everything (share 1 / N).
@dataclass(frozen=True, slots=True)
class Spread:
    """What full recompute keeps on one rank: `share` of its layers checkpointed (the rest keep their whole
    activations and are not re-run), the checkpointed layers' inputs x `input_scale`, `group` layers re-run
    together (their working set alive at once)."""

    share: float = 1.0
    input_scale: float = 1.0
    group: int = 1


def spread_of(method: str, n: int, layers_on_rank: int, vpp: int) -> Spread:
    """The Spread of a recompute method with N = `n` on a rank holding `layers_on_rank` layers in `vpp`
    model chunks."""
    if method == "block":
        per_chunk = max(1, layers_on_rank // max(1, vpp))
        return Spread(share=min(1.0, n / per_chunk))
    if method == "every_nth":
        return Spread(share=1.0 / n)
    return Spread(input_scale=1.0 / n, group=min(n, max(1, layers_on_rank)))
