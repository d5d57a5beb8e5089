"""Corpus of strategies whose `estimate()` outputs tests/perf/test_estimate_pinned.py pins (no-behaviour-change guard).

Regenerate the JSON ONLY when a change to the model's predictions is intended (and say so in the commit):

    .venv/bin/python tests/data/pinned_estimates.py

It rewrites tests/data/pinned_estimates.json from the current code. A refactor must leave it unchanged.
Each case names a catalog model and GPU, the GPU count, and Workload/Strategy fields (everything else default).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_suffix(".json")

Case = dict[str, Any]


def _case(
    name: str, model: str, gpu: str, gpus: int, workload: dict, strategy: dict, *, strict: bool = True
) -> Case:
    """strict=False: also the layouts only the lenient rules allow (e.g. tp > kv_heads, KV heads replicated)."""
    return {
        "name": name,
        "model": model,
        "gpu": gpu,
        "gpus": gpus,
        "workload": workload,
        "strategy": strategy,
        "strict": strict,
    }


def _w(seq: int, batch: int, **kw: Any) -> dict:
    return {"seq_len": seq, "global_batch": batch, **kw}


def _dense() -> list[Case]:
    return [
        _case("l8b-tp1-dp8", "Llama-3-8B", "H100-SXM", 8, _w(8192, 128), {"tp": 1, "micro_batch": 1}),
        _case(
            "l8b-tp2sp", "Llama-3-8B", "H100-SXM", 8, _w(8192, 128), {"tp": 2, "sp": True, "micro_batch": 2}
        ),
        _case("l8b-tp8-nosp", "Llama-3-8B", "A100-80GB", 8, _w(4096, 64), {"tp": 8, "micro_batch": 1}),
        _case("l8b-tp16-kv8", "Llama-3-8B", "GB200", 32, _w(4096, 64), {"tp": 16, "sp": True}, strict=False),
        _case(
            "qwen3-30b-tp8-kv4",
            "Qwen3-30B-A3B",
            "H100-SXM",
            16,
            _w(4096, 64),
            {"tp": 8, "ep": 2, "sp": True},
            strict=False,
        ),
        _case(
            "l70b-tp8pp4-1f1b",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(8192, 256),
            {"tp": 8, "pp": 4, "sp": True, "recompute": "selective"},
        ),
        _case(
            "l70b-interleaved",
            "Llama-3.1-70B",
            "H100-SXM",
            128,
            _w(8192, 512),
            {"tp": 4, "pp": 4, "vpp": 5, "sp": True, "pp_schedule": "interleaved", "recompute": "full"},
        ),
        _case(
            "l70b-zbh1",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(4096, 256),
            {"tp": 8, "pp": 4, "sp": True, "pp_schedule": "zb-h1"},
        ),
        _case(
            "l70b-uneven",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(4096, 256),
            {"tp": 8, "pp": 4, "sp": True, "pp_first_layers": 18, "pp_last_layers": 18},
        ),
        _case(
            "l70b-account",
            "Llama-3.1-70B",
            "H200",
            64,
            _w(4096, 256),
            {"tp": 4, "pp": 2, "sp": True, "pp_account_embedding": True, "pp_account_loss": True},
        ),
        _case(
            "l405b-tp8pp16",
            "Llama-3.1-405B",
            "H100-SXM",
            1024,
            _w(8192, 1024),
            {
                "tp": 8,
                "pp": 8,
                "sp": True,
                "recompute": "selective",
                "pp_first_layers": 15,
                "pp_last_layers": 15,
            },
        ),
        _case("mistral-swa", "Mistral-7B", "A100-80GB", 16, _w(16384, 64), {"tp": 2, "sp": True, "cp": 2}),
        _case(
            "qwen3-8b-none",
            "Qwen3-8B",
            "H200",
            8,
            _w(4096, 64),
            {"tp": 1, "micro_batch": 2, "recompute": "none"},
        ),
        _case(
            "l8b-overlap",
            "Llama-3-8B",
            "H100-SXM",
            16,
            _w(8192, 128, tp_comm_overlap=True),
            {"tp": 4, "sp": True},
        ),
        _case(
            "l70b-overlap-full",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(8192, 128, tp_comm_overlap=True),
            {"tp": 8, "pp": 2, "sp": True, "recompute": "full"},
        ),
        _case("l8b-cudagraph", "Llama-3-8B", "B200", 8, _w(4096, 64, cuda_graphs=True), {"tp": 1}),
        _case("l8b-ddp", "Llama-3-8B", "H100-SXM", 16, _w(2048, 256), {"tp": 1, "zero": 0}),
        _case("l8b-zero2", "Llama-3-8B", "H100-SXM", 16, _w(2048, 256), {"tp": 1, "zero": 2}),
        _case("l8b-offload", "Llama-3-8B", "A100-40GB", 8, _w(2048, 64), {"tp": 2, "optimizer_offload": 0.5}),
        _case(
            "l8b-bf16states",
            "Llama-3-8B",
            "A100-40GB",
            8,
            _w(2048, 64),
            {"tp": 2, "optimizer_states": "bf16"},
        ),
        _case("l8b-8bit", "Llama-3-8B", "A100-40GB", 8, _w(2048, 64, optimizer="adam_8bit"), {"tp": 2}),
        _case(
            "gpt-oss-dense-attn",
            "GPT-OSS-120B",
            "H100-SXM",
            64,
            _w(8192, 128),
            {"tp": 4, "ep": 8, "sp": True},
        ),
        _case("mi300x-l70b", "Llama-3.1-70B", "MI300X", 64, _w(4096, 128), {"tp": 8, "pp": 2, "sp": True}),
        _case("gb200-l405b", "Llama-3.1-405B", "GB200", 288, _w(8192, 288), {"tp": 4, "pp": 9, "sp": True}),
    ]


def _legacy_and_stacks() -> list[Case]:
    legacy = {"framework": "megatron-legacy"}
    return [
        _case(
            "gpt175-legacy-none",
            "GPT-3-175B-Megatron",
            "A100-80GB",
            1024,
            _w(2048, 1536, **legacy),
            {"tp": 8, "pp": 16},
        ),
        _case(
            "gpt175-legacy-sel-sp",
            "GPT-3-175B-Megatron",
            "A100-80GB",
            512,
            _w(2048, 512, **legacy),
            {"tp": 8, "pp": 8, "sp": True, "recompute": "selective"},
        ),
        _case(
            "gpt175-legacy-full",
            "GPT-3-175B-Megatron",
            "A100-80GB",
            512,
            _w(2048, 512, **legacy),
            {"tp": 8, "pp": 8, "recompute": "full", "pp_schedule": "interleaved", "vpp": 3},
        ),
        _case(
            "gpt13-legacy-cp",
            "GPT-3-13B",
            "A100-80GB",
            32,
            _w(8192, 64, **legacy),
            {"tp": 4, "cp": 2, "sp": True},
        ),
        _case(
            "l8b-torchtitan-fsdp",
            "Llama-3-8B",
            "H100-SXM",
            64,
            _w(8192, 64, framework="torchtitan"),
            {"tp": 1, "zero": 3, "recompute": "selective"},
        ),
        _case(
            "l70b-torchtitan-hsdp",
            "Llama-3.1-70B",
            "H100-SXM",
            128,
            _w(8192, 128, framework="torchtitan", tp_comm_overlap=True),
            {"tp": 8, "zero": 3, "dp_shard": 8, "sp": True, "recompute": "selective"},
        ),
        _case(
            "l70b-torchtitan-3d",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(8192, 64, framework="torchtitan"),
            {"tp": 4, "pp": 4, "zero": 3, "sp": True, "recompute": "full"},
        ),
        _case(
            "l8b-fsdp", "Llama-3-8B", "A100-80GB", 32, _w(4096, 128, framework="fsdp"), {"tp": 1, "zero": 3}
        ),
        _case(
            "l8b-fsdp-full",
            "Llama-3-8B",
            "A100-40GB",
            16,
            _w(4096, 64, framework="fsdp"),
            {"zero": 3, "recompute": "full"},
        ),
        _case(
            "l8b-deepspeed-z2",
            "Llama-3-8B",
            "A100-80GB",
            16,
            _w(4096, 128, framework="deepspeed"),
            {"zero": 2},
        ),
        _case(
            "l70b-deepspeed-z3",
            "Llama-3.1-70B",
            "A100-80GB",
            64,
            _w(4096, 128, framework="deepspeed"),
            {"zero": 3, "recompute": "full", "micro_batch": 2},
        ),
        _case("l8b-lora", "Llama-3-8B", "H100-SXM", 8, _w(4096, 64, finetune="lora"), {"tp": 1, "zero": 1}),
        _case(
            "l70b-lora-pp",
            "Llama-3.1-70B",
            "H100-SXM",
            16,
            _w(4096, 64, finetune="lora", lora_dim=16),
            {"tp": 4, "pp": 4, "sp": True, "recompute": "selective"},
        ),
        _case(
            "mixtral-lora",
            "Mixtral-8x7B",
            "H100-SXM",
            16,
            _w(4096, 64, finetune="lora"),
            {"tp": 2, "ep": 8, "sp": True},
        ),
    ]


def _moe() -> list[Case]:
    fp8 = {"precision": "fp8"}
    return [
        _case(
            "dsv3-pp16-ep64",
            "DeepSeek-V3",
            "H800",
            2048,
            _w(4096, 15360, **fp8),
            {
                "tp": 1,
                "pp": 16,
                "ep": 64,
                "pp_schedule": "dualpipe",
                "pp_first_layers": 4,
                "pp_last_layers": 1,
            },
        ),
        _case(
            "dsv3-ep-overlap-flex",
            "DeepSeek-V3",
            "H100-SXM",
            1024,
            _w(4096, 8192, **fp8, moe_dispatcher="flex", moe_ep_overlap=True),
            {"tp": 2, "pp": 1, "ep": 64, "etp": 1, "sp": True, "recompute": "selective"},
        ),
        # Megatron-Core refuses the overlap with PP and no virtual stages (layouts.ep_overlap_applies): priced
        # without it
        _case(
            "dsv3-ep-overlap-refused-pp",
            "DeepSeek-V3",
            "H100-SXM",
            1024,
            _w(4096, 8192, **fp8, moe_dispatcher="flex", moe_ep_overlap=True),
            {
                "tp": 2,
                "pp": 8,
                "ep": 64,
                "etp": 1,
                "sp": True,
                "pp_first_layers": 5,
                "pp_last_layers": 2,
                "recompute": "selective",
            },
        ),
        _case(
            "dsv3-bf16-full",
            "DeepSeek-V3",
            "H100-SXM",
            1024,
            _w(4096, 4096),
            {
                "tp": 4,
                "pp": 16,
                "ep": 16,
                "etp": 1,
                "sp": True,
                "recompute": "full",
                "pp_first_layers": 1,
                "pp_last_layers": 4,
            },
        ),
        _case(
            "dsv3-cp",
            "DeepSeek-V3",
            "B200",
            1024,
            _w(32768, 1024, **fp8, fp8_recipe="mxfp8"),
            {
                "tp": 2,
                "pp": 8,
                "cp": 4,
                "ep": 32,
                "etp": 1,
                "sp": True,
                "pp_first_layers": 5,
                "pp_last_layers": 2,
            },
        ),
        _case(
            "mixtral-ep8",
            "Mixtral-8x7B",
            "H100-SXM",
            64,
            _w(4096, 256),
            {"tp": 2, "pp": 2, "ep": 8, "sp": True},
        ),
        _case(
            "mixtral-etp",
            "Mixtral-8x7B",
            "H100-SXM",
            32,
            _w(4096, 256),
            {"tp": 4, "ep": 4, "etp": 2, "sp": True},
        ),
        _case(
            "mixtral-cap",
            "Mixtral-8x7B",
            "A100-80GB",
            64,
            _w(4096, 256, moe_capacity_factor=1.25),
            {"tp": 2, "ep": 8, "sp": True},
        ),
        _case(
            "mixtral22-balanced",
            "Mixtral-8x22B",
            "H100-SXM",
            128,
            _w(4096, 256, moe_imbalance=1.0),
            {"tp": 4, "pp": 4, "ep": 8, "sp": True, "recompute": "selective"},
        ),
        _case("qwen3-30b-ep", "Qwen3-30B-A3B", "H100-SXM", 16, _w(4096, 128), {"tp": 1, "ep": 16}),
        _case(
            "qwen3-30b-fp8",
            "Qwen3-30B-A3B",
            "H100-SXM",
            16,
            _w(4096, 128, **fp8, fp8_recipe="current"),
            {"tp": 2, "ep": 8, "etp": 1, "sp": True},
        ),
        _case(
            "qwen3-235b",
            "Qwen3-235B-A22B",
            "H100-SXM",
            256,
            _w(4096, 1024, **fp8, fp8_recipe="delayed"),
            {
                "tp": 2,
                "pp": 8,
                "ep": 16,
                "etp": 1,
                "sp": True,
                "recompute": "full",
                "pp_first_layers": 10,
                "pp_last_layers": 12,
            },
        ),
        _case(
            "qwen3-235b-a2a-cp",
            "Qwen3-235B-A22B",
            "H200",
            256,
            _w(16384, 256),
            {
                "tp": 2,
                "pp": 4,
                "cp": 2,
                "ep": 8,
                "etp": 1,
                "sp": True,
                "cp_comm": "a2a",
                "pp_first_layers": 22,
                "pp_last_layers": 24,
            },
        ),
        _case(
            "dsv2-zero3",
            "DeepSeek-V2",
            "H100-SXM",
            128,
            _w(4096, 512, framework="torchtitan"),
            {"ep": 8, "zero": 3},
        ),
    ]


def _fp8_and_cp() -> list[Case]:
    return [
        _case("l8b-fp8-delayed", "Llama-3-8B", "H100-SXM", 8, _w(8192, 128, precision="fp8"), {"tp": 1}),
        _case(
            "l8b-fp8-rowwise",
            "Llama-3-8B",
            "H100-SXM",
            8,
            _w(8192, 128, precision="fp8", fp8_recipe="rowwise", framework="torchtitan"),
            {"tp": 2, "sp": True, "zero": 3},
        ),
        _case(
            "l70b-fp8-mxfp8",
            "Llama-3.1-70B",
            "B200",
            64,
            _w(8192, 256, precision="fp8", fp8_recipe="mxfp8"),
            {"tp": 4, "pp": 2, "sp": True},
        ),
        _case(
            "l70b-fp8-current",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(8192, 256, precision="fp8", fp8_recipe="current"),
            {"tp": 8, "pp": 2, "sp": True, "recompute": "selective"},
        ),
        _case(
            "l8b-cp-p2p",
            "Llama-3-8B",
            "H100-SXM",
            32,
            _w(65536, 32),
            {"tp": 2, "cp": 8, "sp": True, "recompute": "full"},
        ),
        _case(
            "l8b-cp-a2a", "Llama-3-8B", "H100-SXM", 32, _w(65536, 32), {"tp": 1, "cp": 8, "cp_comm": "a2a"}
        ),
        _case(
            "l8b-cp-allgather",
            "Llama-3-8B",
            "H100-SXM",
            32,
            _w(32768, 32),
            {"tp": 2, "cp": 4, "sp": True, "cp_comm": "allgather"},
        ),
        _case(
            "l70b-cp-a2a-p2p",
            "Llama-3.1-70B",
            "H100-SXM",
            128,
            _w(131072, 16),
            {"tp": 8, "pp": 2, "cp": 8, "sp": True, "cp_comm": "a2a+p2p", "recompute": "selective"},
        ),
        _case(
            "l70b-cp-fsdp",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(32768, 32, framework="torchtitan"),
            {"tp": 8, "cp": 4, "sp": True, "zero": 3},
        ),
    ]


def _completed() -> list[Case]:
    """Strategies with unset knobs: pins the completion (perf/complete.py) as well."""
    return [
        _case(
            "l8b-unset",
            "Llama-3-8B",
            "H100-SXM",
            16,
            _w(8192, 128),
            {"tp": 2, "sp": True, "micro_batch": None, "recompute": None},
        ),
        _case(
            "mixtral-unset-etp",
            "Mixtral-8x7B",
            "H100-SXM",
            32,
            _w(4096, 128),
            {"tp": 2, "pp": 2, "ep": 8, "sp": True, "zero": None},
        ),
        _case(
            "l70b-unset-sched",
            "Llama-3.1-70B",
            "H100-SXM",
            64,
            _w(4096, 256),
            {"tp": 8, "pp": 4, "sp": True, "vpp": None, "pp_schedule": None},
        ),
    ]


def cases() -> list[Case]:
    return _dense() + _legacy_and_stacks() + _moe() + _fp8_and_cp() + _completed()


def run_case(case: Case) -> dict[str, Any]:
    """Everything `estimate()` returns for one case, as JSON-ready values."""
    from autopar.catalog import get_gpu, get_model
    from autopar.perf import estimate
    from autopar.specs import ClusterSpec, Strategy, Workload

    cluster = ClusterSpec(gpu=get_gpu(case["gpu"]), num_gpus=case["gpus"])
    workload, strategy = Workload(**case["workload"]), Strategy(**case["strategy"])
    est = estimate(get_model(case["model"]), cluster, workload, strategy, strict=case["strict"])
    out: dict[str, Any] = dict(est.summary())
    out["memory"] = est.memory.as_dict()
    out["time"] = est.time.as_dict()
    out["model_flops_per_step"] = est.model_flops_per_step
    out["hw_flops_per_step"] = est.hw_flops_per_step
    out["notes"] = list(est.notes)
    out["assumed"] = list(est.assumed)
    out["strategy"] = est.strategy.model_dump(mode="json") if est.strategy is not None else None
    return out


def _finite(x: Any) -> Any:
    """JSON has no inf/nan: store them as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    return x


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    rows = [{**c, "expected": _finite(run_case(c))} for c in cases()]
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names)), "duplicate case names"
    OUT.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(rows)} cases to {OUT}")


if __name__ == "__main__":
    main()
