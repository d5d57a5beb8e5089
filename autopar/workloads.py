"""Workload profiles (`--workload`, `autopar profile`): what a kind of training run is, what autopar plans for it
and the problem defaults it brings.

A profile only fills in what the user did not state (its `defaults` are WorkloadConfig fields), so
`--workload finetune --seq-len 8192` keeps the user's sequence length. A profile autopar does not model yet is
listed by `autopar profile` with what it will plan, and refused by `--workload` in one line: a flag that cannot
take effect is an error, never silently a pre-training plan. Long context and MoE are problems (a sequence
length, a model), not workloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autopar.defaults import DEFAULT_GLOBAL_BATCH, DEFAULT_SEQ_LEN
from autopar.errors import SpecError, close_hint

# What every modelled workload's search optimises (autopar/objectives: the --objectives default).
_OBJECTIVES = "tokens/s per GPU and $ per million tokens (with --tokens: days and dollars to train)"


@dataclass(frozen=True)
class WorkloadProfile:
    """One workload: what a step is, what the search optimises, the defaults it sets and their source."""

    name: str
    step: str
    optimises: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    modelled: bool = True


WORKLOAD_PROFILES: tuple[WorkloadProfile, ...] = (
    WorkloadProfile(
        "pretrain",
        "every weight trained on packed sequences",
        _OBJECTIVES,
        {"finetune": "full", "seq_len": DEFAULT_SEQ_LEN, "global_batch": DEFAULT_GLOBAL_BATCH},
        "Megatron-Bridge's Llama 3 pre-training configs: seq_length 8192, global_batch_size 512 "
        "(src/megatron/bridge/recipes/llama/llama3.py, commit 6f6f95e0)",
    ),
    WorkloadProfile(
        "finetune",
        "LoRA adapters on a frozen base (--finetune full: every weight, SFT; --lora-base nf4: QLoRA)",
        _OBJECTIVES,
        {"finetune": "lora", "seq_len": 4096, "global_batch": 8},
        "Megatron-Bridge's fine-tuning recipes: LoRA on packed SQuAD, seq_length 4096, global_batch_size 8 "
        "(_llama3_finetune_common, packed_sequence=True; recipes/llama/llama3.py, commit 6f6f95e0)",
    ),
    WorkloadProfile(
        "rlhf",
        "PPO / GRPO: rollouts (prefill and decode with a KV cache at an inference layout), actor (and critic) "
        "training, reference and reward forward passes, weight resharding between the phases",
        "samples/s per GPU over the whole iteration, memory per pool, $ per iteration",
        modelled=False,
    ),
    WorkloadProfile(
        "serve",
        "inference: prefill and decode with a KV cache, aggregated or disaggregated",
        "throughput per GPU against time to first token and time per output token under an SLA",
        modelled=False,
    ),
)
WORKLOADS: tuple[str, ...] = tuple(p.name for p in WORKLOAD_PROFILES)
MODELLED: tuple[str, ...] = tuple(p.name for p in WORKLOAD_PROFILES if p.modelled)


def profile_of(name: str) -> WorkloadProfile:
    """The profile called `name`; a one-line error naming the workloads (close matches suggested), and one
    saying so for a workload autopar does not plan yet."""
    found = next((p for p in WORKLOAD_PROFILES if p.name == name), None)
    if found is None:
        raise SpecError(
            f"--workload {name}: expected one of {', '.join(WORKLOADS)}{close_hint(name, WORKLOADS)}"
        )
    if not found.modelled:
        raise SpecError(
            f"--workload {name}: not planned yet (autopar plans {', '.join(MODELLED)}; `autopar profile` "
            "lists what each workload will plan)"
        )
    return found


def with_profile(values: Mapping[str, Any]) -> dict[str, Any]:
    """WorkloadConfig input with its workload's defaults filled in where the input is silent; a stated field
    the workload contradicts (LoRA in pre-training) is a one-line error."""
    out = dict(values)
    name = out.get("workload")
    if name is None:
        return out
    profile = profile_of(str(name))
    if name == "pretrain" and out.get("finetune") not in (None, "full"):
        raise SpecError(
            f"--finetune {out['finetune']}: --workload pretrain trains every weight (--workload finetune plans "
            "LoRA)"
        )
    for key, value in profile.defaults.items():
        if out.get(key) is None:
            out[key] = value
    return out
