"""Tests of the model/GPU catalogs, name matching, HF config import and the `models`/`gpus` commands."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog import (
    SUPPORTED_MODEL_TYPES,
    get_gpu,
    get_model,
    gpu_notes,
    list_gpus,
    list_models,
    model_from_hf_config,
    model_notes,
)
from autopar.errors import AutoparError, DataError, SpecError, UnknownNameError
from autopar.perf.params import count_params
from autopar.specs import ModelSpec

HF_DIR = Path(__file__).parents[1] / "data" / "hf"
GROUND_TRUTH = Path(__file__).resolve().parents[3] / "shared" / "groundtruth" / "public.csv"


def arch(m: ModelSpec) -> dict:
    """Everything that defines the architecture (not the name, aliases or source)."""
    return m.model_dump(exclude={"name", "aliases", "source"})


# ------------------------------------------------------------------------------------------ loading


def test_every_model_entry_loads_and_counts():
    models = list_models()
    assert len(models) >= 45
    names = [m.name for m in models]
    assert len(names) == len(set(names))
    for m in models:
        assert m.source.startswith("https://"), m.name
        c = count_params(m)
        assert c.total > 1e9, m.name
        if m.is_moe:
            assert c.active < c.total, m.name
        else:
            assert c.active == c.total, m.name


def test_every_gpu_entry_loads_with_sane_units():
    gpus = list_gpus()
    assert {g.name for g in gpus} >= {
        "A100-40GB",
        "A100-80GB",
        "H100-SXM",
        "H100-PCIe",
        "H200",
        "B200",
        "GB200",
        "MI300X",
        "MI325X",
        "H100-SXM-96GB-500W",
    }
    for g in gpus:
        assert 30e9 <= g.memory_bytes <= 300e9, g.name  # bytes, GB = 1e9
        assert 100e12 <= g.bf16_flops <= 3e15, g.name  # FLOP/s, dense
        assert g.fp8_flops is None or g.fp8_flops >= 1.9 * g.bf16_flops, g.name
        assert 0.5e12 <= g.hbm_bw <= 10e12, g.name  # GDDR6 parts from 0.864e12 (L40S), HBM from 1.5e12
        assert g.scaleout_bw < g.scaleup_bw, g.name
        assert g.price_usd_per_hour and 0.5 < g.price_usd_per_hour < 20, g.name
        assert g.source.startswith("https://"), g.name


def test_gpu_figures_match_formulas_table():
    # formulas.md §8 (dense; per GPU per direction); 400 Gb/s NDR = 50e9 B/s.
    h100 = get_gpu("H100-SXM")
    assert (h100.memory_bytes, h100.bf16_flops, h100.fp8_flops) == (80e9, 989e12, 1979e12)
    assert (h100.hbm_bw, h100.scaleup_bw, h100.scaleout_bw, h100.tdp_watts) == (3.35e12, 450e9, 50e9, 700)
    a100 = get_gpu("A100-40GB")
    assert (a100.bf16_flops, a100.fp8_flops, a100.hbm_bw, a100.scaleout_bw) == (312e12, None, 1.555e12, 25e9)
    assert a100.peak_flops("fp8") == 312e12  # no FP8: falls back to BF16
    gb200 = get_gpu("GB200")
    assert (gb200.scaleup_domain, gb200.bf16_flops, gb200.memory_bytes) == (72, 2500e12, 186e9)
    assert get_gpu("B200").scaleup_bw == 900e9
    assert get_gpu("MI300X").memory_bytes == 192e9 and get_gpu("MI325X").memory_bytes == 256e9
    assert get_gpu("H200").hbm_bw == 4.8e12


def test_grand_teton_h100_is_between_nvl_and_sxm():
    # torchtitan docs/performance.md: 96 GB HBM2e, 2.4 TB/s, 500 W, 400 Gb/s per GPU, NVLink.
    g = get_gpu("grand-teton-h100")
    assert g is get_gpu("h100-hbm2e-96gb") is get_gpu("H100-SXM-96GB-500W")
    assert 835e12 <= g.bf16_flops <= 989e12  # H100 NVL (400 W) .. H100 SXM (700 W)
    assert g.fp8_flops == 2 * g.bf16_flops
    assert (g.memory_bytes, g.hbm_bw, g.tdp_watts, g.scaleout_bw) == (96e9, 2.4e12, 500, 50e9)
    assert g.scaleup_bw == get_gpu("H100-SXM").scaleup_bw
    assert "estimate" in gpu_notes("grand-teton-h100")


# --------------------------------------------------------------------------------- golden counts

# (catalog name, published total, tolerance, published active or None, tolerance, citation)
GOLDEN = [
    ("Llama-3-70B", 70.55e9, 0.005, None, 0, "formulas.md §1 check (70.55 B); HF safetensors 70.6B"),
    ("Llama-3-8B", 8.03e9, 0.005, None, 0, "formulas.md §1 check (8.03 B); Meta model card 8.03B"),
    ("Llama-3.1-405B", 405e9, 0.005, None, 0, "Llama 3 herd paper (arXiv 2407.21783): 405B"),
    ("Llama-2-70B", 69e9, 0.005, None, 0, "Llama 2 70B: 68.98B by count, HF lists 69B"),
    ("GPT-3-175B", 175e9, 0.005, None, 0, "Brown et al. 2020 Table 2.1: 175.0B"),
    ("BLOOM-176B", 176.247e9, 0.005, None, 0, "BLOOM paper (arXiv 2211.05100): 176,247M"),
    ("Nemotron-4-340B", 340e9, 0.005, None, 0, "Nemotron-4 340B report (arXiv 2406.11704)"),
    (
        "DeepSeek-V3",
        671e9,
        0.005,
        37e9,
        0.02,
        "DeepSeek-V3 report: 671B total, 37B activated (formulas.md §1 gives 671.0/37.6; 37B is rounded)",
    ),
    ("DeepSeek-V2", 236e9, 0.005, 21e9, 0.025, "DeepSeek-V2 paper: 236B total, 21B activated (rounded)"),
    ("Mixtral-8x7B", 46.7e9, 0.005, 12.9e9, 0.01, "Mistral AI blog 'Mixtral of experts': 46.7B / 12.9B"),
    ("Mixtral-8x22B", 141e9, 0.005, 39e9, 0.01, "Mistral AI blog 'Cheaper, better...': 141B / 39B"),
    ("Qwen3-235B-A22B", 235e9, 0.005, 22e9, 0.015, "Qwen3 technical report: 235B total, 22B activated"),
    ("Qwen3-30B-A3B", 30.5e9, 0.005, 3.3e9, 0.02, "Qwen3 model card: 30.5B total, 3.3B activated"),
    # OpenAI gpt-oss model card: 116.83B total; 5.13B active *excluding the input embedding*, which
    # count_params includes: 5.13e9 + 201088 * 2880 = 5.13e9 + 0.579e9 = 5.709e9.
    ("GPT-OSS-120B", 116.83e9, 0.005, 5.709e9, 0.01, "OpenAI gpt-oss-120b model card"),
    # The same card: gpt-oss-20b 20.91B total, 3.61B active excluding the input embedding
    # (+0.579e9 = 4.189e9).
    ("GPT-OSS-20B", 20.91e9, 0.005, 4.189e9, 0.01, "OpenAI gpt-oss-20b model card"),
]


@pytest.mark.parametrize(
    ("name", "total", "tol", "active", "atol", "cite"), GOLDEN, ids=[g[0] for g in GOLDEN]
)
def test_golden_parameter_counts(name, total, tol, active, atol, cite):
    c = count_params(get_model(name))
    assert c.total == pytest.approx(total, rel=tol), cite
    if active is not None:
        assert c.active == pytest.approx(active, rel=atol), cite


def test_llama3_70b_count_by_hand():
    # per layer: attention 8192*128*(2*64 + 2*8) = 150,994,944; SwiGLU 3*8192*28672 = 704,643,072;
    # two RMSNorms 16,384 -> 855,654,400 x 80 layers = 68,452,352,000; untied embedding + output
    # 2*128256*8192 = 2,101,346,304; final norm 8,192 -> 70,553,706,496.
    assert count_params(get_model("Llama-3-70B")).total == 70_553_706_496


def test_qwen_72b_count_by_hand():
    # Qwen-72B (v1) config: hidden 8192, 80 layers, 64 heads, no GQA, intermediate_size 49152 = two SwiGLU halves
    # of 24,576, vocab 152,064, untied. Per layer: QKV 3*8192^2 + bias 3*8192 = 201,351,168; out 8192^2 =
    # 67,108,864; SwiGLU 3*8192*24576 = 603,979,776; two RMSNorms 16,384 -> 872,456,192 x 80 = 69,796,495,360;
    # embedding + output 2*152064*8192 = 2,491,416,576; final norm 8,192 -> 72,287,920,128.
    assert count_params(get_model("qwen-72b")).total == 72_287_920_128


# The model presets of seed (a)'s advisor API (issue 47), each a model alias everywhere, the CLI included.
ADVISOR_PRESETS = {
    "llama-7b": "Llama-2-7B",
    "llama-13b": "Llama-2-13B",
    "llama-70b": "Llama-2-70B",
    "llama-3.1-8b": "Llama-3.1-8B",
    "llama-3.1-70b": "Llama-3.1-70B",
    "llama-3.1-405b": "Llama-3.1-405B",
    "mixtral-8x7b": "Mixtral-8x7B",
    "mixtral-8x22b": "Mixtral-8x22B",
    "deepseek-v2": "DeepSeek-V2",
    "deepseek-v3": "DeepSeek-V3",
    "deepseek-r1": "DeepSeek-V3",  # R1 is V3's architecture, post-trained
    "qwen-72b": "Qwen-72B",
}


@pytest.mark.parametrize(("preset", "name"), ADVISOR_PRESETS.items())
def test_advisor_presets_are_model_aliases(preset: str, name: str) -> None:
    assert get_model(preset).name == name


# ---------------------------------------------------------------------------------- name matching


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("llama3-70b", "Llama-3-70B"),
        ("LLAMA3-70B", "Llama-3-70B"),
        ("llama 3 70b", "Llama-3-70B"),
        ("llama-3.1-70b", "Llama-3.1-70B"),
        ("meta-llama/Llama-3.1-70B", "Llama-3.1-70B"),
        ("Llama_3.1_70B", "Llama-3.1-70B"),
        ("someorg/llama-3.1-405b", "Llama-3.1-405B"),
        ("LLAMA2-7B", "Llama-2-7B"),
        ("GPT3-175B", "GPT-3-175B"),
        ("gpt-3", "GPT-3-175B"),
        ("GPT-529.6B", "MT-NLG-530B"),
        ("GPT-1008.0B", "GPT-1T"),
        ("MPT-7b", "MPT-7B"),
        ("Nemotron-340B", "Nemotron-4-340B"),
        ("gpt3-13b", "GPT-3-13B"),
        ("GPT-3-1.3B", "GPT-3-1.3B"),
        ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
        ("mixtral 8x7b", "Mixtral-8x7B"),
        ("GPT-174.6B", "GPT-3-175B-Megatron"),
    ],
)
def test_model_aliases_and_case(query, expected):
    assert get_model(query).name == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("h100", "H100-SXM"),
        ("H100-80GB", "H100-SXM"),
        ("h100_sxm", "H100-SXM"),
        ("a100", "A100-80GB"),
        ("A100 40GB", "A100-40GB"),
        ("mi300x", "MI300X"),
        ("gb200-nvl72", "GB200"),
        ("h100 pcie", "H100-PCIe"),
    ],
)
def test_gpu_aliases_and_case(query, expected):
    assert get_gpu(query).name == expected


def test_every_name_and_alias_resolves_to_its_entry():
    for m in list_models():
        for label in (m.name, *m.aliases):
            assert get_model(label) is m, label
    for g in list_gpus():
        for label in (g.name, *g.aliases):
            assert get_gpu(label) is g, label


def test_unknown_model_suggests_close_names():
    with pytest.raises(UnknownNameError) as info:
        get_model("llama-3.1-7b")
    msg = str(info.value)
    assert "unknown model 'llama-3.1-7b'" in msg and "did you mean" in msg
    assert any(s.startswith("Llama-3.1") for s in info.value.suggestions)


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(UnknownNameError) as info:
        get_gpu("H1000")
    assert "unknown GPU 'H1000'" in str(info.value)
    assert "H100-SXM" in info.value.suggestions or "H200" in info.value.suggestions


def test_unknown_name_echo_is_cut():
    # a 5000-character name is shown as its first 57 characters + '...' (text.EXCERPT_CHARS = 60), the name kept whole
    with pytest.raises(UnknownNameError) as info:
        get_model("q" * 5000)
    assert f"unknown model '{'q' * 57}...'" in str(info.value) and len(str(info.value)) < 400
    assert info.value.name == "q" * 5000


def test_loose_collision_is_ambiguous_not_guessed():
    # 'GPT-3 1.3B' and 'GPT-3 13B' both become 'gpt313b' once '.' and '-' are ignored.
    with pytest.raises(AutoparError, match="ambiguous.*GPT-3-1.3B.*GPT-3-13B"):
        get_model("gpt313b")


_SEPARATORS = st.sampled_from(["", "-", "_", ".", " "])


@settings(max_examples=60, deadline=None)
@given(
    idx=st.integers(min_value=0, max_value=10_000),
    seps=st.lists(_SEPARATORS, min_size=40, max_size=40),
    upper=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_name_matching_ignores_case_and_separators(idx, seps, upper):
    models = list_models()
    m = models[idx % len(models)]
    # rebuild the name from its alphanumeric characters with arbitrary separators and case
    chars = [c for c in m.name if c.isalnum()]
    mangled = "".join(
        (c.upper() if u else c.lower()) + s for c, s, u in zip(chars, seps, upper, strict=False)
    )
    try:
        assert get_model(mangled) is m
    except AutoparError as e:  # only a documented loose collision may refuse to guess
        assert "ambiguous" in str(e) and m.name in str(e)


# ------------------------------------------------------------------------------------ HF import

FIXTURES = {
    "llama-3.1-70b.json": "Llama-3.1-70B",
    "mistral-7b-v0.1.json": "Mistral-7B",
    "mixtral-8x7b-v0.1.json": "Mixtral-8x7B",
    "qwen2.5-7b.json": "Qwen2.5-7B",
    "qwen3-8b.json": "Qwen3-8B",
    "qwen3-30b-a3b.json": "Qwen3-30B-A3B",
    "qwen3-235b-a22b.json": "Qwen3-235B-A22B",
    "deepseek-v2.json": "DeepSeek-V2",
    "deepseek-v3.json": "DeepSeek-V3",
    "gpt2-xl.json": "GPT-2-XL",
    "gpt-oss-120b.json": "GPT-OSS-120B",
}


def test_fixtures_cover_every_supported_model_type():
    types = {json.loads((HF_DIR / f).read_text())["model_type"] for f in FIXTURES}
    from test_hf_import import INLINE_TYPES  # written inline from the transformers field names

    assert types | INLINE_TYPES >= set(SUPPORTED_MODEL_TYPES) - {"qwen2_moe"}


@pytest.mark.parametrize(("fixture", "name"), sorted(FIXTURES.items()))
def test_hf_import_equals_catalog_entry(fixture, name):
    cfg = json.loads((HF_DIR / fixture).read_text())
    imported = model_from_hf_config(cfg, name="x")
    assert arch(imported) == arch(get_model(name))


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_get_model_reads_a_config_path(fixture):
    m = get_model(str(HF_DIR / fixture))
    assert m.name == fixture.removesuffix(".json")
    assert m.source.endswith(fixture)


def test_hf_import_key_fields():
    oss = model_from_hf_config(json.loads((HF_DIR / "gpt-oss-120b.json").read_text()))
    assert (oss.experts, oss.topk, oss.dh, oss.kv, oss.qkv_bias) == (128, 4, 64, 8, True)
    assert (oss.sliding_window, oss.sliding_window_fraction) == (128, 0.5)
    dsv3 = model_from_hf_config(json.loads((HF_DIR / "deepseek-v3.json").read_text()))
    assert (dsv3.dense_layers, dsv3.shared_experts, dsv3.moe_ffn_hidden, dsv3.is_mla) == (3, 1, 2048, True)
    qwen = model_from_hf_config(json.loads((HF_DIR / "qwen3-235b-a22b.json").read_text()))
    assert qwen.dh == 128 and qwen.hidden // qwen.heads == 64
    assert model_from_hf_config(json.loads((HF_DIR / "qwen2.5-7b.json").read_text())).qkv_bias
    gpt2 = model_from_hf_config(json.loads((HF_DIR / "gpt2-xl.json").read_text()))
    assert (gpt2.ffn_hidden, gpt2.tied_embeddings, gpt2.activation, gpt2.norm) == (
        6400,
        True,
        "gelu",
        "layernorm",
    )
    assert (
        model_from_hf_config(
            {
                "model_type": "llama",
                "_name_or_path": "org/My-Model",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 100,
            }
        ).name
        == "My-Model"
    )


def test_hf_import_directory_with_config_json(tmp_path):
    d = tmp_path / "my-llama"
    d.mkdir()
    shutil.copy(HF_DIR / "llama-3.1-70b.json", d / "config.json")
    assert arch(get_model(str(d))) == arch(get_model("Llama-3.1-70B"))
    assert get_model(str(d / "config.json")).name == "my-llama"


def test_model_file_with_spec_fields(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text("layers: 2\nhidden: 64\nheads: 4\nffn_hidden: 256\nvocab: 1000\n")
    m = get_model(str(p))
    assert (m.name, m.layers, m.dh) == ("tiny", 2, 16)


def test_missing_model_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        get_model(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="could not be parsed"):
        get_model(str(bad))


def test_unsupported_model_type_names_type_and_supported_list():
    with pytest.raises(SpecError) as info:
        model_from_hf_config({"model_type": "mamba", "hidden_size": 768})
    msg = str(info.value)
    assert "'mamba'" in msg and "llama" in msg and "deepseek_v3" in msg and "gpt_oss" in msg


def test_missing_required_key_is_named():
    cfg = json.loads((HF_DIR / "llama-3.1-70b.json").read_text())
    del cfg["intermediate_size"]
    with pytest.raises(SpecError, match="missing required key 'intermediate_size'"):
        model_from_hf_config(cfg)
    cfg = json.loads((HF_DIR / "deepseek-v3.json").read_text())
    del cfg["kv_lora_rank"]
    with pytest.raises(SpecError, match="'kv_lora_rank'"):
        model_from_hf_config(cfg)
    with pytest.raises(SpecError, match="no 'model_type'"):
        model_from_hf_config({"hidden_size": 8})


def test_bad_value_is_named():
    cfg = json.loads((HF_DIR / "llama-3.1-70b.json").read_text()) | {"num_hidden_layers": "80"}
    with pytest.raises(SpecError, match="'num_hidden_layers'='80'"):
        model_from_hf_config(cfg)
    cfg = json.loads((HF_DIR / "llama-3.1-70b.json").read_text()) | {"num_key_value_heads": 7}
    with pytest.raises(SpecError, match="not a multiple of kv_heads=7"):
        model_from_hf_config(cfg)


def test_sliding_window_rules():
    qwen = json.loads((HF_DIR / "qwen2.5-7b.json").read_text())
    assert model_from_hf_config(qwen).sliding_window is None  # use_sliding_window false
    # with the window on, layers with index >= max_window_layers slide: 28 - 21 = 7 of 28 layers
    on = model_from_hf_config(
        qwen | {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21}
    )
    assert (on.sliding_window, on.sliding_window_fraction) == (4096, 0.25)
    mistral = model_from_hf_config(json.loads((HF_DIR / "mistral-7b-v0.1.json").read_text()))
    assert (mistral.sliding_window, mistral.sliding_window_fraction) == (4096, 1.0)
    mixtral = model_from_hf_config(json.loads((HF_DIR / "mixtral-8x7b-v0.1.json").read_text()))
    assert mixtral.sliding_window is None


def test_moe_layout_rules():
    q = json.loads((HF_DIR / "qwen3-30b-a3b.json").read_text())
    assert model_from_hf_config(q | {"mlp_only_layers": [0, 1]}).dense_layers == 2
    with pytest.raises(SpecError, match="mlp_only_layers"):
        model_from_hf_config(q | {"mlp_only_layers": [5]})
    with pytest.raises(SpecError, match="decoder_sparse_step"):
        model_from_hf_config(q | {"decoder_sparse_step": 2})
    d = json.loads((HF_DIR / "deepseek-v2.json").read_text())
    with pytest.raises(SpecError, match="moe_layer_freq"):
        model_from_hf_config(d | {"moe_layer_freq": 2})


def test_qwen2_moe_shared_expert_and_text_config():
    cfg = {
        "model_type": "qwen2_moe",
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "vocab_size": 151936,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
    }
    m = model_from_hf_config({"model_type": "some_vlm", "text_config": cfg}, name="vlm")
    assert (m.name, m.experts, m.shared_experts, m.shared_ffn, m.qkv_bias) == ("vlm", 60, 1, 5632, True)


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 200),
    heads=st.sampled_from([8, 16, 32, 64, 128]),
    group=st.sampled_from([1, 2, 4, 8]),
    dh=st.sampled_from([64, 80, 128]),
    ffn=st.integers(1, 100_000),
    vocab=st.integers(1, 300_000),
    tied=st.booleans(),
)
def test_llama_config_maps_field_for_field(layers, heads, group, dh, ffn, vocab, tied):
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": heads * dh,
        "num_attention_heads": heads,
        "num_key_value_heads": heads // group,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }
    m = model_from_hf_config(cfg)
    assert (m.layers, m.hidden, m.heads, m.kv, m.dh, m.ffn_hidden, m.vocab, m.tied_embeddings) == (
        layers,
        heads * dh,
        heads,
        heads // group,
        dh,
        ffn,
        vocab,
        tied,
    )
    # formulas.md §1: L*(h*dh*(2a+2k) + 3hf + 2h) + V*h*(1 or 2) + h
    h, k = heads * dh, heads // group
    expected = (
        layers * (h * dh * (2 * heads + 2 * k) + 3 * h * ffn + 2 * h) + vocab * h * (1 if tied else 2) + h
    )
    assert count_params(m).total == expected


# ---------------------------------------------------------------------------- run-record names


@pytest.mark.skipif(not GROUND_TRUTH.is_file(), reason="shared ground-truth CSV not present")
def test_groundtruth_model_names_resolve_with_same_architecture():
    rows = list(csv.DictReader(GROUND_TRUTH.open()))
    checked = 0
    for row in rows:
        m = get_model(row["model"])
        for col, value in [
            ("layers", m.layers),
            ("hidden", m.hidden),
            ("ffn_hidden", m.ffn_hidden),
            ("heads", m.heads),
            ("kv_heads", m.kv),
            ("head_dim", m.dh),
            ("vocab", m.vocab),
        ]:
            if not row[col]:
                continue
            if col == "vocab" and m.name == "GPT-3-175B":
                # Brown et al. vocab 50257; Megatron pads it to 51200 (entry GPT-3-175B-Megatron)
                assert int(row[col]) == get_model("GPT-3-175B-Megatron").vocab
                continue
            assert int(float(row[col])) == value, (row["id"], col)
            checked += 1
    assert checked > 500


# -------------------------------------------------------------------------------------------- CLI


def _cli():
    from autopar.cli import app

    return CliRunner(), app


def test_cli_models_table_and_json():
    runner, app = _cli()
    res = runner.invoke(app, ["models"])
    assert res.exit_code == 0, res.output
    assert "Llama-3.1-70B" in res.output and "DeepSeek-V3" in res.output
    res = runner.invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert len(data) == len(list_models())
    llama = next(d for d in data if d["name"] == "Llama-3-70B")
    assert llama["total_params"] == 70_553_706_496 and llama["kind"] == "dense"
    dsv3 = next(d for d in data if d["name"] == "DeepSeek-V3")
    assert dsv3["kind"] == "moe" and dsv3["active_params"] < dsv3["total_params"]


def test_cli_gpus_table_and_json():
    runner, app = _cli()
    res = runner.invoke(app, ["gpus"])
    assert res.exit_code == 0, res.output
    assert "H100-SXM" in res.output and "MI300X" in res.output
    res = runner.invoke(app, ["gpus", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {d["name"] for d in data} == {g.name for g in list_gpus()}
    assert next(d for d in data if d["name"] == "GB200")["scaleup_domain"] == 72


def test_cli_filter():
    runner, app = _cli()
    res = runner.invoke(app, ["models", "qwen3", "--json"])
    assert res.exit_code == 0
    assert {d["name"] for d in json.loads(res.output)} == {"Qwen3-8B", "Qwen3-30B-A3B", "Qwen3-235B-A22B"}
    res = runner.invoke(app, ["gpus", "h100", "--json"])
    assert {d["name"] for d in json.loads(res.output)} == {"H100-SXM", "H100-PCIe", "H100-SXM-96GB-500W"}
    res = runner.invoke(app, ["models", "lama-9"])
    assert res.exit_code == 2 and "unknown model 'lama-9'" in res.output


def test_model_notes_record_deviations():
    assert "51200" in model_notes("GPT-3-175B")
    assert "gelu" in model_notes("Nemotron-4-340B")
    assert "5140" in model_notes("GPT-3-13B")


def test_version_command():
    from autopar import __version__

    runner, app = _cli()
    r = runner.invoke(app, ["version"])
    assert r.exit_code == 0 and f"autopar {__version__}" in r.stdout and "optuna" in r.stdout


@pytest.mark.parametrize("model", ["~0", "~0.json", "~no_such_user_autopar/config.json"])
def test_model_tilde_naming_no_user_is_a_clear_error(model):
    """`~user` that names no user on the machine: pathlib's expanduser raises RuntimeError ("Could not
    determine home directory"), found by test_fuzz_inputs; it must read as a name or a missing file."""
    runner, app = _cli()
    res = runner.invoke(app, ["estimate", "--model", model])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error:") and model in line


def test_expand_user_keeps_an_unknown_user_literal(tmp_path, monkeypatch):
    from autopar.files import expand_user

    monkeypatch.setenv("HOME", str(tmp_path))
    assert expand_user("~/x.json") == tmp_path / "x.json"
    assert expand_user("~no_such_user_autopar/x.json") == Path("~no_such_user_autopar/x.json")
