"""Which optimizer and master-weights precision (Workload.optimizer, Workload.master_weights) each launch target
can express, and the arguments or the one-line reason it cannot.

Megatron-LM --optimizer (launch_schemas megatron-core_v0.19.0.json: adam, sgd, muon, dist_muon, lion, soap,
adaptive_muon; core_v0.17.1 without soap and adaptive_muon): no Adafactor or CAME. --main-params-dtype fp16
runs through --use-precision-aware-optimizer, which megatron/core/optimizer/optimizer_config.py (core_v0.19.0
OptimizerConfig.__post_init__) allows with Adam and the distributed optimizer only; Megatron always keeps a
main-params copy (fp32 or fp16), so master_weights=bf16 (none) is not expressible.
torchtitan v0.2.2 torchtitan/components/optimizer.py build_optimizers: optimizer.name "Adam" or "AdamW" only,
fp32 FSDP2 parameters (the master copy). DeepSpeed leaves the optimizer to the training script or to its
'optimizer' section: a note names the type (deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS, else
getattr(torch.optim, type) in runtime/engine.py).
"""

from __future__ import annotations

from autopar.specs import Strategy, Workload

MEGATRON_OPTIMIZER: dict[str, str] = {
    "adam": "adam",
    "adam_bf16_states": "adam",
    "adam_8bit": "adam",
    "sgd": "sgd",
    "lion": "lion",
}
# DeepSpeed 'optimizer.type' per optimizer: its own Adam/AdamW and FusedLion ('Lion'), torch.optim.SGD and
# torch.optim.Adafactor (PyTorch >= 2.5); CAME has none (the training script builds it).
DEEPSPEED_OPTIMIZER: dict[str, str] = {
    "adam": "AdamW", "adam_bf16_states": "AdamW", "adam_8bit": "AdamW", "sgd": "SGD", "adafactor": "Adafactor",
    "lion": "Lion",
}  # fmt: skip


def megatron_optimizer_why(workload: Workload, s: Strategy) -> str:
    """Why Megatron-LM's arguments cannot run the workload's optimizer or master weights ('' when they can)."""
    opt, master = workload.optimizer, workload.master_weights
    if opt not in MEGATRON_OPTIMIZER:
        return f"optimizer={opt}: Megatron-LM's --optimizer has no {opt} (adam, sgd, lion, muon variants)"
    if master == "bf16":
        return "master_weights=bf16: Megatron-LM always keeps a main-params copy (--main-params-dtype fp32 or fp16)"
    if master == "fp16" and (MEGATRON_OPTIMIZER[opt] != "adam" or not s.zero):
        return (
            "master_weights=fp16: --main-params-dtype fp16 runs through --use-precision-aware-optimizer, "
            "Adam with the distributed optimizer (zero >= 1) only"
        )
    return ""


def megatron_optimizer_args(workload: Workload) -> list[str]:
    """--optimizer (when not Adam, Megatron's default) and --main-params-dtype fp16 (call the check first)."""
    a: list[str] = []
    name = MEGATRON_OPTIMIZER.get(workload.optimizer, "adam")
    if name != "adam":
        a.append(f"--optimizer {name}")
    if workload.master_weights == "fp16":
        a += ["--use-precision-aware-optimizer", "--main-params-dtype fp16"]
    return a


def torchtitan_optimizer_why(workload: Workload) -> str:
    """Why torchtitan's job config cannot run the workload's optimizer or master weights ('' when it can)."""
    if workload.optimizer != "adam":
        return f"optimizer={workload.optimizer}: torchtitan's optimizer.name takes Adam or AdamW only"
    if workload.master_weights != "fp32":
        return f"master_weights={workload.master_weights}: torchtitan keeps fp32 FSDP2 parameters as the master copy"
    return ""


def deepspeed_optimizer_notes(workload: Workload) -> list[str]:
    """What DeepSpeed's 'optimizer' section (or the training script) must name for a non-default optimizer."""
    opt, kind = workload.optimizer, DEEPSPEED_OPTIMIZER.get(workload.optimizer)
    out = []
    if opt != "adam":
        out.append(
            f"optimizer={opt}: DeepSpeed 'optimizer' type '{kind}'" if kind
            else f"optimizer={opt}: DeepSpeed has no such type; the training script must build it"
        )  # fmt: skip
    if workload.master_weights != "fp32":
        out.append(
            f"master_weights={workload.master_weights}: DeepSpeed's bf16 mode keeps fp32 master weights"
        )
    return out
