"""Import a Hugging Face `config.json` (dict) as a ModelSpec, for the model types autopar can count.

Field names follow the transformers configuration classes (LlamaConfig, Gemma2Config,
Gemma3TextConfig, Qwen3Config, Qwen3MoeConfig, Llama4TextConfig, ...). A field that changes the
architecture in a way ModelSpec cannot represent is refused with one line naming it
("unsupported field X=value"), never silently dropped. Gated-GeLU MLPs (Gemma) have the shape and
FLOPs of SwiGLU (three h x f matrices) and are counted as such.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from autopar.errors import SpecError
from autopar.inputs import require_finite, shown
from autopar.specs import ModelSpec

Fields = dict[str, Any]
_MISSING = object()


# rope_theta of real models: 1e4 (Llama-2) to 1e6-1e7 (long-context Qwen/Llama); 1e12 is far above and
# keeps round(rope_theta) and the launch scripts' integers finite.
MAX_ROPE_THETA = 1e12
# rope_scaling.factor of real models: 2 to 64 (YaRN, Llama-3.1 8); a context extension factor beyond
# 1e6 is not one.
MAX_ROPE_FACTOR = 1e6


class _Reader:
    """Typed access to one HF config with one-line errors that name the key (dotted path) and value."""

    def __init__(self, cfg: Mapping[str, Any], model_type: str, prefix: str = ""):
        self.cfg, self.mt, self.prefix = cfg, model_type, prefix

    def name(self, key: str) -> str:
        """The dotted path of `key` in the config (rope_scaling.factor)."""
        return f"{self.prefix}{key}"

    def error(self, key: str, value: Any, allowed: str) -> SpecError:
        return SpecError(f"Hugging Face config key '{self.name(key)}'={shown(value)} must be {allowed}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> Any:
        """An integer >= minimum; a missing key falls back to `default` or is an error."""
        value = self.cfg.get(key)
        if value is None:
            if default is _MISSING:
                raise SpecError(
                    f"Hugging Face config (model_type '{self.mt}') is missing required key '{self.name(key)}'"
                )
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, value, f"an integer >= {minimum}")
        return value

    def number(self, key: str, default: float, *, maximum: float) -> float:
        """A finite number > 0 and <= maximum; `default` when the key is absent."""
        value = self.cfg.get(key)
        if value is None:
            return default
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        if not ok or not (0 < float(value) <= maximum):  # NaN and inf fail the comparison
            raise self.error(key, value, f"a finite number > 0 and <= {maximum:g}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        """A boolean flag with a default for when the key is absent."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, value, "true or false")
        return value

    def text(self, key: str, default: str) -> str:
        """A string; `default` when the key is absent."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, value, "a string")
        return value

    def items(self, key: str, kind: type, what: str) -> list[Any]:
        """A list whose every item is of `kind` (bool never counts as int); [] when absent."""
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or any(
            isinstance(x, bool) != (kind is bool) or not isinstance(x, kind) for x in value
        ):
            raise self.error(key, value, f"a list of {what}")
        return value

    def mapping(self, key: str) -> _Reader | None:
        """A nested object as a reader whose errors name `key.sub`; None when absent or empty."""
        value = self.cfg.get(key)
        if not value:
            return None
        if not isinstance(value, Mapping):
            raise self.error(key, value, "an object")
        return _Reader(value, self.mt, f"{self.name(key)}.")

    def first_int(self, *keys: str) -> int:
        """The first of several alternative keys that is present (e.g. num_experts_per_tok / experts_per_token)."""
        for key in keys:
            if self.has(key):
                return self.integer(key)
        raise SpecError(f"Hugging Face config (model_type '{self.mt}') is missing required key '{keys[0]}'")


def unsupported(r: _Reader, key: str, why: str) -> SpecError:
    """The one-line error for a config field autopar cannot represent."""
    return SpecError(
        f"unsupported field {r.name(key)}={shown(r.cfg.get(key))} in Hugging Face config (model_type '{r.mt}'): {why}"
    )


_ROPE_TYPES = {"default": None, "llama3": "llama3", "yarn": "yarn", "linear": "linear"}


def _rope(r: _Reader) -> Fields:
    """rope_theta and rope_scaling {rope_type|type, factor} (transformers' RoPE init functions)."""
    theta = r.number("rope_theta", 10000.0, maximum=MAX_ROPE_THETA)
    scaling = r.mapping("rope_scaling")
    if scaling is None:
        return {"rope_theta": theta}
    kind = scaling.text("rope_type", scaling.text("type", "default"))
    if kind not in _ROPE_TYPES:
        raise unsupported(r, "rope_scaling", f"rope_type {kind!r} (supported: {', '.join(_ROPE_TYPES)})")
    factor = scaling.number("factor", 0.0, maximum=MAX_ROPE_FACTOR) if scaling.has("factor") else None
    return {
        "rope_theta": theta,
        "rope_scaling": _ROPE_TYPES[kind],
        "rope_scaling_factor": factor if _ROPE_TYPES[kind] and factor else None,
    }


def _decoder(r: _Reader, *, tied_default: bool = False, bias_default: bool = False) -> Fields:
    """Fields shared by the Llama-style decoders (RMSNorm, SwiGLU, RoPE, optional GQA)."""
    heads = r.integer("num_attention_heads")
    if r.flag("mlp_bias", False):
        raise unsupported(r, "mlp_bias", "MLP biases are not modelled (only QKV biases)")
    return _rope(r) | {
        "layers": r.integer("num_hidden_layers"),
        "hidden": r.integer("hidden_size"),
        "heads": heads,
        "kv_heads": r.integer("num_key_value_heads", heads),
        "head_dim": r.integer("head_dim", None),
        "ffn_hidden": r.integer("intermediate_size"),
        "vocab": r.integer("vocab_size"),
        "tied_embeddings": r.flag("tie_word_embeddings", tied_default),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "qkv_bias": r.flag("attention_bias", bias_default),
        "norm_eps": r.number("rms_norm_eps", None, maximum=_MAX_NORM_EPS),
    }


# Largest norm epsilon accepted (configs use 1e-6 .. 1e-5); anything near 1 is a typo for another field.
_MAX_NORM_EPS = 0.1


def _router(r: _Reader, *, norm_default: bool) -> Fields:
    """MoE router settings (HF Mixtral/Qwen-MoE/DeepSeek names): score function, top-k renormalisation,
    group-limited routing, routed scaling, aux-loss-free bias and the load-balancing loss weight."""
    score = r.text("scoring_func", "softmax")
    if score not in ("softmax", "sigmoid"):
        raise r.error("scoring_func", score, "softmax or sigmoid")
    alpha = r.cfg.get("aux_loss_alpha", r.cfg.get("router_aux_loss_coef"))
    key = "aux_loss_alpha" if "aux_loss_alpha" in r.cfg else "router_aux_loss_coef"
    if alpha is not None and (
        isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1
    ):
        raise r.error(key, alpha, "a number in 0..1")
    return {
        "router_score": score,
        "router_norm_topk": r.flag("norm_topk_prob", norm_default),
        "router_expert_bias": r.text("topk_method", "") == "noaux_tc",
        "router_groups": r.integer("n_group", None),
        "router_group_topk": r.integer("topk_group", None),
        "router_scaling": r.number("routed_scaling_factor", None, maximum=1e3),
        "aux_loss_coeff": None if alpha is None else float(alpha),
        "aux_loss_per_sequence": r.flag("seq_aux", False),
    }


def _window_from_layer_types(r: _Reader, layers: int) -> Fields:
    """Sliding-window size and the fraction of layers that use it, from `layer_types`."""
    types = r.items("layer_types", str, "strings (full_attention, sliding_attention, ...)")
    if not types:
        return {}
    sliding = sum(1 for t in types if t == "sliding_attention")
    if not sliding:
        return {}
    return {"sliding_window": r.integer("sliding_window"), "sliding_window_fraction": sliding / len(types)}


def _window_qwen(r: _Reader, layers: int) -> Fields:
    """Qwen: a window only when use_sliding_window, on layers at index >= max_window_layers."""
    if r.cfg.get("layer_types"):
        return _window_from_layer_types(r, layers)
    if not r.flag("use_sliding_window", False) or not r.has("sliding_window"):
        return {}
    start = min(r.integer("max_window_layers", layers, minimum=0), layers)
    if start >= layers:
        return {}
    return {
        "sliding_window": r.integer("sliding_window"),
        "sliding_window_fraction": (layers - start) / layers,
    }


def _window_mistral(r: _Reader, layers: int) -> Fields:
    """Mistral/Mixtral: a non-null sliding_window applies to every layer."""
    if r.cfg.get("layer_types"):
        return _window_from_layer_types(r, layers)
    if not r.has("sliding_window"):
        return {}
    return {"sliding_window": r.integer("sliding_window"), "sliding_window_fraction": 1.0}


def _llama(r: _Reader) -> Fields:
    f = _decoder(r)
    return f | _window_from_layer_types(r, f["layers"])


def _mistral(r: _Reader) -> Fields:
    f = _decoder(r)
    return f | _window_mistral(r, f["layers"])


def _mixtral(r: _Reader) -> Fields:
    f = _mistral(r)
    return (
        f
        | {
            "experts": r.integer("num_local_experts"),
            "topk": r.integer("num_experts_per_tok"),
            "moe_ffn_hidden": f["ffn_hidden"],
        }
        | _router(r, norm_default=True)
    )  # Mixtral: softmax over the top-k logits (renormalised)


def _qwen2(r: _Reader) -> Fields:
    f = _decoder(r) | {"qkv_bias": True}  # Qwen2 always has q/k/v biases
    return f | _window_qwen(r, f["layers"])


def _qwen3(r: _Reader) -> Fields:
    f = _decoder(r) | {"qk_norm": True}  # Qwen3 normalises q and k per head (Qwen3Attention q_norm/k_norm)
    return f | _window_qwen(r, f["layers"])


# A soft-capping value (Gemma-2: 50 attention, 30 final); only whether it is set changes the FLOPs.
_MAX_SOFTCAP = 1e6


def _softcap(r: _Reader) -> bool:
    keys = ("attn_logit_softcapping", "final_logit_softcapping")
    return any(r.number(k, 0.0, maximum=_MAX_SOFTCAP) for k in keys if r.has(k))


def _window_every(r: _Reader, layers: int, default_pattern: int) -> Fields:
    """Gemma: sliding window on all but every n-th layer (layer_types when the config lists them)."""
    if r.cfg.get("layer_types"):
        return _window_from_layer_types(r, layers)
    if not r.has("sliding_window"):
        return {}
    n = r.integer("sliding_window_pattern", default_pattern)
    full = layers // n
    return {
        "sliding_window": r.integer("sliding_window"),
        "sliding_window_fraction": (layers - full) / layers,
    }


def _gemma2(r: _Reader) -> Fields:
    """Gemma-2: GeGLU MLP, head_dim given explicitly (256), local/global attention alternating,
    attention and final-logit soft-capping, tied embeddings."""
    f = _decoder(r, tied_default=True) | {"head_dim": r.integer("head_dim", 256), "softcapping": _softcap(r)}
    return f | _window_every(r, f["layers"], 2)


def _gemma3(r: _Reader) -> Fields:
    """Gemma-3 (text): as Gemma-2 with q/k norms, 5 local : 1 global layers, no soft-capping."""
    f = _decoder(r, tied_default=True) | {"head_dim": r.integer("head_dim", 256), "qk_norm": True}
    return f | {"softcapping": _softcap(r)} | _window_every(r, f["layers"], 6)


def _llama4(r: _Reader) -> Fields:
    """Llama-4 (text): MoE on every layer (Scout) with one shared expert, q/k norms, chunked local
    attention (attention_chunk_size) on the RoPE layers — counted as a sliding window."""
    step = r.integer("interleave_moe_layer_step", 1)
    if step != 1:
        raise unsupported(r, "interleave_moe_layer_step", "only 1 (an MoE MLP on every layer) is supported")
    f = _decoder(r)
    f |= {
        "ffn_hidden": r.integer("intermediate_size_mlp", f["ffn_hidden"]),
        "experts": r.integer("num_local_experts"),
        "topk": r.integer("num_experts_per_tok"),
        "moe_ffn_hidden": r.integer("intermediate_size"),
        "shared_experts": 1,
        "qk_norm": r.flag("use_qk_norm", True),
    }
    nope = r.items("no_rope_layers", int, "integers (1 = RoPE layer, 0 = NoPE layer)")
    if r.has("attention_chunk_size") and nope:
        local = sum(1 for x in nope if x) / len(nope)  # 1 = this layer uses RoPE (and chunked attention)
        f |= {"sliding_window": r.integer("attention_chunk_size"), "sliding_window_fraction": local}
    return f


def _leading_dense_layers(r: _Reader, layers: int) -> int:
    """Qwen-MoE dense layers: `mlp_only_layers` must be a leading block and decoder_sparse_step 1."""
    step = r.integer("decoder_sparse_step", 1)
    if step != 1:
        raise SpecError(
            f"Hugging Face config key 'decoder_sparse_step'={step} is not supported (only 1: every layer MoE)"
        )
    only = r.items("mlp_only_layers", int, "layer indices (integers)")
    if sorted(only) != list(range(len(only))):
        raise SpecError(
            f"Hugging Face config key 'mlp_only_layers'={only!r} is not supported "
            "(only a leading block of dense layers, e.g. [0, 1])"
        )
    return len(only)


def _qwen_moe(r: _Reader, base: Fields) -> Fields:
    shared = r.integer("shared_expert_intermediate_size", 0, minimum=0)
    return (
        base
        | {
            "experts": r.integer("num_experts"),
            "topk": r.integer("num_experts_per_tok"),
            "moe_ffn_hidden": r.integer("moe_intermediate_size"),
            "shared_experts": 1 if shared else 0,
            "shared_ffn_hidden": shared or None,
            "dense_layers": _leading_dense_layers(r, base["layers"]),
        }
        | _router(r, norm_default=False)
    )  # Qwen2MoeConfig/Qwen3MoeConfig norm_topk_prob defaults to false


def _qwen2_moe(r: _Reader) -> Fields:
    return _qwen_moe(r, _qwen2(r))


def _qwen3_moe(r: _Reader) -> Fields:
    return _qwen_moe(r, _qwen3(r))


def _deepseek(r: _Reader) -> Fields:
    """DeepSeek-V2/V3: MLA attention, leading dense layers, routed + shared experts."""
    f = _decoder(r)
    f |= {
        "kv_heads": None,
        "head_dim": None,
        "q_lora_rank": r.integer("q_lora_rank", None),
        "kv_lora_rank": r.integer("kv_lora_rank"),
        "qk_nope_head_dim": r.integer("qk_nope_head_dim"),
        "qk_rope_head_dim": r.integer("qk_rope_head_dim"),
        "v_head_dim": r.integer("v_head_dim"),
    }
    if not r.has("n_routed_experts"):
        return f
    freq = r.integer("moe_layer_freq", 1)
    if freq != 1:
        raise SpecError(f"Hugging Face config key 'moe_layer_freq'={freq} is not supported (only 1)")
    return (
        f
        | {
            "experts": r.integer("n_routed_experts"),
            "topk": r.integer("num_experts_per_tok"),
            "moe_ffn_hidden": r.integer("moe_intermediate_size"),
            "shared_experts": r.integer("n_shared_experts", 0, minimum=0),
            "dense_layers": r.integer("first_k_dense_replace", 0, minimum=0),
        }
        | _router(r, norm_default=False)
    )  # DeepseekV2Config: norm_topk_prob false unless set (V3 sets it)


def _gpt_oss(r: _Reader) -> Fields:
    """GPT-OSS: MoE SwiGLU experts with biases and clamped inputs (swiglu_limit, 7.0 in transformers'
    GptOssConfig), attention biases, alternating sliding/full attention."""
    f = _decoder(r, bias_default=True) | {"head_dim": r.integer("head_dim", 64)}
    f |= {
        "experts": r.first_int("num_local_experts", "num_experts"),
        "topk": r.first_int("num_experts_per_tok", "experts_per_token"),
        "moe_ffn_hidden": f["ffn_hidden"],
        "expert_bias": True,
        "glu_clamp": r.number("swiglu_limit", 7.0, maximum=1e6),
    }
    if r.cfg.get("layer_types"):
        return f | _window_from_layer_types(r, f["layers"])
    if r.has("sliding_window"):  # older configs: even layers sliding, odd layers full
        return f | {"sliding_window": r.integer("sliding_window"), "sliding_window_fraction": 0.5}
    return f


def _gpt2(r: _Reader) -> Fields:
    """GPT-2: LayerNorm, GeLU MLP (n_inner defaults to 4*n_embd), biases, tied embeddings.

    Learned position embeddings (n_positions x n_embd) are not counted.
    """
    hidden = r.integer("n_embd")
    r.integer("n_positions", 1024)  # validated only
    return {
        "layers": r.integer("n_layer"),
        "hidden": hidden,
        "heads": r.integer("n_head"),
        "ffn_hidden": r.integer("n_inner", 4 * hidden),
        "vocab": r.integer("vocab_size"),
        "tied_embeddings": r.flag("tie_word_embeddings", True),
        "activation": "gelu",
        "norm": "layernorm",
        "qkv_bias": True,
        "position_embedding": "learned",
    }


_BUILDERS: dict[str, Callable[[_Reader], Fields]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
    "llama4_text": _llama4,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt2": _gpt2,
    "gpt_oss": _gpt_oss,
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BUILDERS)


def canonical_fields(fields: Fields) -> Fields:
    """Drop redundant values (kv_heads == heads, head_dim == hidden/heads) so equal models compare equal."""
    out = dict(fields)
    heads, hidden = out.get("heads"), out.get("hidden")
    if out.get("kv_heads") is not None and out["kv_heads"] == heads:
        out["kv_heads"] = None
    if (
        out.get("head_dim") is not None
        and heads
        and hidden
        and hidden % heads == 0
        and out["head_dim"] == hidden // heads
    ):
        out["head_dim"] = None
    return out


def _pydantic_message(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'model'}: {e['msg']}" for e in err.errors())


def model_from_hf_config(cfg: Mapping[str, Any], name: str | None = None, source: str = "") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict, so any supported HF model can be planned for.

    Supported model_type values are SUPPORTED_MODEL_TYPES; a multimodal config whose own type is not
    supported is read through its `text_config`. Unsupported types and missing keys raise SpecError.
    """
    if not isinstance(cfg, Mapping):
        raise SpecError(f"a Hugging Face config must be a JSON object, got {type(cfg).__name__}")
    require_finite(cfg, "Hugging Face config")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    mt = cfg.get("model_type")
    if mt is not None and not isinstance(mt, str):  # e.g. a list: would be unhashable below
        raise SpecError(
            f"Hugging Face config model_type={shown(mt)}: expected a string (supported: {supported})"
        )
    if mt not in _BUILDERS and isinstance(cfg.get("text_config"), Mapping):
        return model_from_hf_config(cfg["text_config"], name or _default_name(cfg), source)
    if mt is None:
        raise SpecError(f"Hugging Face config has no 'model_type' (supported: {supported})")
    if mt not in _BUILDERS:
        raise SpecError(f"unsupported Hugging Face model_type '{mt}' (supported: {supported})")
    fields = _BUILDERS[mt](_Reader(cfg, mt))
    label = name or _default_name(cfg)
    try:
        return ModelSpec(name=label, source=source, **canonical_fields(fields))
    except ValidationError as e:
        raise SpecError(
            f"Hugging Face config for '{label}' gives an invalid model: {_pydantic_message(e)}"
        ) from None


def _default_name(cfg: Mapping[str, Any]) -> str:
    """A readable name for an imported config: its _name_or_path, else its model_type."""
    path = cfg.get("_name_or_path")
    if isinstance(path, str) and path.strip():
        return path.strip().rstrip("/").rsplit("/", 1)[-1]
    return str(cfg.get("model_type") or "hf-model")
