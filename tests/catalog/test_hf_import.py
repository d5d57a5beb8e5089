"""HF config.json import of current architectures: Gemma-2, Gemma-3, Qwen3 (dense, head_dim != hidden/heads),
Llama-4 (MoE every layer, chunked attention) — and one-line errors for fields autopar cannot represent.

The config dicts are written here from the public field names of the transformers configuration
classes (Gemma2Config, Gemma3TextConfig, Qwen3Config, Llama4TextConfig) with the published sizes of
google/gemma-2-9b, google/gemma-3-27b-pt, Qwen/Qwen3-0.6B and meta-llama/Llama-4-Scout-17B-16E.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autopar.catalog import get_gpu
from autopar.catalog.hf import model_from_hf_config
from autopar.cli import app
from autopar.errors import SpecError
from autopar.launch.settings import launch_settings
from autopar.perf.params import count_params
from autopar.specs import ClusterSpec, Strategy, Workload

# model_type values these tests cover (tests/catalog/test_catalog.py covers the others with full fixtures)
INLINE_TYPES = {"gemma2", "gemma3_text", "llama4_text"}

GEMMA2_9B = {
    "model_type": "gemma2",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "vocab_size": 256000,
    "hidden_activation": "gelu_pytorch_tanh",
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "query_pre_attn_scalar": 256,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
GEMMA3_27B = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "vocab_size": 262208,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
    },
    "vision_config": {"model_type": "siglip_vision_model"},
}
QWEN3_06B = {
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "rope_theta": 1000000,
    "use_sliding_window": False,
    "sliding_window": None,
}
LLAMA4_SCOUT = {
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 202048,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "original_max_position_embeddings": 8192},
        "attention_chunk_size": 8192,
        "no_rope_layers": [1, 1, 1, 0] * 12,
        "use_qk_norm": True,
        "tie_word_embeddings": False,
    },
}


def test_gemma2_window_softcap_head_dim() -> None:
    m = model_from_hf_config(GEMMA2_9B, name="gemma-2-9b")
    assert (m.dh, m.hidden // m.heads) == (256, 224)  # head_dim != hidden / heads
    assert (m.sliding_window, m.sliding_window_fraction) == (4096, 0.5)  # local/global alternate
    assert m.softcapping and m.tied_embeddings and m.kv == 8
    # 9,241,705,984 parameters (google/gemma-2-9b model card: 9.24B); norms aside, by hand:
    # 42 x (3584*4096*2 + 3584*2048*2 + 3*3584*14336) + 256000*3584 = 9,241,538,560
    assert count_params(m).total == pytest.approx(9.2417e9, rel=0.002)


def test_gemma3_text_config_through_multimodal_wrapper() -> None:
    m = model_from_hf_config(GEMMA3_27B, name="gemma-3-27b")
    assert m.layers == 62 and m.dh == 128 and m.qk_norm and not m.softcapping
    assert m.sliding_window == 1024
    assert m.sliding_window_fraction == pytest.approx(52 / 62)  # every 6th of 62 layers global: 10
    assert (m.rope_theta, m.rope_scaling, m.rope_scaling_factor) == (1e6, "linear", 8.0)


def test_qwen3_dense_head_dim_and_qk_norm() -> None:
    m = model_from_hf_config(QWEN3_06B, name="Qwen3-0.6B")
    assert (m.dh, m.hidden // m.heads, m.qk_norm, m.sliding_window) == (128, 64, True, None)
    # Qwen/Qwen3-0.6B: 0.6B total, 0.44B without embeddings (model card)
    c = count_params(m)
    assert c.total == pytest.approx(0.596e9, rel=0.01)
    assert c.total - 151936 * 1024 == pytest.approx(0.44e9, rel=0.01)


def test_llama4_scout_moe_every_layer() -> None:
    m = model_from_hf_config(LLAMA4_SCOUT, name="Llama-4-Scout")
    assert (m.experts, m.topk, m.shared_experts, m.moe_ffn_hidden, m.dense_layers) == (16, 1, 1, 8192, 0)
    assert (m.sliding_window, m.sliding_window_fraction) == (8192, 0.75)  # chunked attention on RoPE layers
    assert (m.rope_scaling, m.rope_scaling_factor, m.qk_norm) == ("llama3", 16.0, True)
    c = count_params(m)
    assert c.total == pytest.approx(109e9, rel=0.03)  # model card: 109B total (incl. vision ~1B)
    assert c.active == pytest.approx(17e9, rel=0.03)  # 17B active


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            {**LLAMA4_SCOUT["text_config"], "interleave_moe_layer_step": 2},
            "unsupported field interleave_moe_layer_step=2 in Hugging Face config (model_type 'llama4_text'): "
            "only 1 (an MoE MLP on every layer) is supported",
        ),
        (
            {**QWEN3_06B, "rope_scaling": {"rope_type": "longrope", "factor": 4}},
            "unsupported field rope_scaling={'rope_type': 'longrope', 'factor': 4} in Hugging Face config "
            "(model_type 'qwen3'): rope_type 'longrope' (supported: default, llama3, yarn, linear)",
        ),
        (
            {**QWEN3_06B, "model_type": "llama", "mlp_bias": True},
            "unsupported field mlp_bias=True in Hugging Face config (model_type 'llama'): "
            "MLP biases are not modelled (only QKV biases)",
        ),
    ],
)
def test_unsupported_fields_are_one_line_errors(cfg, message) -> None:
    with pytest.raises(SpecError) as e:
        model_from_hf_config(cfg)
    assert str(e.value) == message


def test_cli_reads_gemma2_config_and_launch_notes_softcap(tmp_path) -> None:
    """`--model path/config.json` for every command; Megatron gets --kv-channels 256 and a soft-cap note."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps(GEMMA2_9B))
    res = CliRunner().invoke(app, ["launch", "--model", str(p), "--gpus", "8", "--tp", "4", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert "--kv-channels 256" in d["megatron_args"]
    assert any("soft-caps" in n for n in d["notes"])
    h100 = get_gpu("H100-SXM")
    m = model_from_hf_config(GEMMA2_9B, name="gemma-2-9b")
    ls = launch_settings(
        m, ClusterSpec(gpu=h100, num_gpus=8), Workload(seq_len=4096, global_batch=64), Strategy()
    )
    assert ls.torchtitan is None and "no built-in model matching gemma-2-9b" in ls.torchtitan_reason
