"""The run configuration a training log prints about itself, as run-record columns.

- Megatron-LM prints its parsed arguments between ``---- arguments ----`` and ``---- end of arguments ----``
  (``  tensor_model_parallel_size ...... 2``; ``None`` = unset) and ``using world size: 8, data-parallel
  size: 4, ...``; `MEGATRON_ARGS` maps the argument names onto run-record columns.
- torchtitan logs ``Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]`` and ``Trainer is
  initialized with local batch size 8, global batch size 64, ..., sequence length 2048`` (older:
  ``Training starts at step 1, with local batch size 1, global batch size 8, sequence length 8192``).
A value given by flags or a sidecar that contradicts the log is an error (`merge_log_config`).
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from autopar.calibration.ingest.log_steps import ANSI
from autopar.errors import DataError
from autopar.knobs import recompute_of_modules
from autopar.layouts import Axis
from autopar.text import excerpt

# Megatron-LM argument name -> run-record column (integer-valued unless listed in _MEG_FLAG_ARGS).
MEGATRON_ARGS: dict[str, str] = {
    "world_size": "num_gpus",
    "tensor_model_parallel_size": Axis.TP.value,
    "pipeline_model_parallel_size": Axis.PP.value,
    "context_parallel_size": Axis.CP.value,
    "expert_model_parallel_size": Axis.EP.value,
    "expert_tensor_parallel_size": Axis.ETP.value,
    "virtual_pipeline_model_parallel_size": Axis.VPP.value,
    "data_parallel_size": Axis.DP.value,
    "micro_batch_size": "micro_batch",
    "global_batch_size": "global_batch",
    "seq_length": "seq_len",
    "num_layers": "layers",
    "hidden_size": "hidden",
    "ffn_hidden_size": "ffn_hidden",
    "num_attention_heads": "heads",
    "num_experts": "experts",
    "moe_router_topk": "topk",
    "moe_ffn_hidden_size": "moe_ffn_hidden",
}


_MEG_ARGS_BLOCK = re.compile(r"-+ arguments -+\n(.*?)\n-+ end of arguments -+", re.S)


_MEG_ARG_LINE = re.compile(r"^\s*(\w+) \.+ (.*?)\s*$")


_MEG_USING = re.compile(r"using world size: (\d+), data-parallel size: (\d+)")


# torchtitan mesh dimensions named as autopar's axes; dp_shard and dp_replicate multiply into dp.
_TT_MESH_AXES = (Axis.TP.value, Axis.PP.value, Axis.CP.value)


_TT_DP_DIMS = ("dp_shard", "dp_replicate")


_TT_MESH = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\], \[([\d, ]*)\]")


# torchtitan's own lines for the stack knobs it applied (torchtitan models/llama3/infra/parallelize.py
# `apply_compile`, distributed/activation_checkpoint.py `apply_ac`)
_TT_COMPILE = re.compile(r"Compiling each TransformerBlock with torch\.compile")


_TT_AC = re.compile(r"Applied '?(selective|full)'? activation checkpointing to the model")


# Megatron-Core's --attention-backend (megatron/core/transformer/enums.py AttnBackend) -> attention_kernel:
# fused is Transformer Engine's cuDNN attention, unfused and local the softmax that keeps the scores
_MEG_ATTENTION = {"flash": "flash", "fused": "cudnn", "unfused": "unfused", "local": "unfused"}


_TT_BATCH = re.compile(
    r"local batch size (\d+), global batch size (\d+),(?: gradient accumulation steps \d+,)? "
    r"sequence length (\d+)"
)


def _megatron_args(text: str) -> dict[str, str]:
    """The raw `name: value` pairs of a Megatron-LM argument dump (unset ones print as 'None')."""
    m = _MEG_ARGS_BLOCK.search(text)
    out: dict[str, str] = {}
    for line in m.group(1).splitlines() if m else []:
        a = _MEG_ARG_LINE.match(line)
        if a:
            out[a.group(1)] = a.group(2)
    u = _MEG_USING.search(text)
    if u:
        out.setdefault("world_size", u.group(1))
        out.setdefault("data_parallel_size", u.group(2))
    return out


def megatron_config(text: str) -> dict[str, Any]:
    """Run-record columns read from a Megatron-LM log's argument dump (empty when it prints none)."""
    every = _megatron_args(ANSI.sub("", text))
    args = {k: v for k, v in every.items() if v != "None"}
    cfg: dict[str, Any] = {col: _int_arg(args, k) for k, col in MEGATRON_ARGS.items() if k in args}
    if args.get("group_query_attention") == "True" and "num_query_groups" in args:
        cfg["kv_heads"] = _int_arg(args, "num_query_groups")
    if "sequence_parallel" in args:
        cfg["sp"] = int(args["sequence_parallel"] == "True")
    if "fp8" in args:  # present (not None): the FP8 recipe name, e.g. 'hybrid' or 'e4m3'
        cfg["precision"] = "fp8"
    elif args.get("bf16") == "True":
        cfg["precision"] = "bf16"
    elif args.get("fp16") == "True":
        cfg["precision"] = "fp16"
    if "recompute_granularity" in every:  # None: no activation recomputation
        rec = _megatron_recompute(args)
        if rec is not None:
            cfg["recompute"] = rec
    if "cpu_offloading" in args:  # activation offloading (record column named after the Megatron flag)
        on = args["cpu_offloading"] == "True"
        cfg["cpu_offloading_num_layers"] = _int_arg(args, "cpu_offloading_num_layers") if on else 0
    if "use_distributed_optimizer" in args:  # Megatron's distributed optimizer shards optimizer states
        cfg["zero"] = int(args["use_distributed_optimizer"] == "True")
    if _megatron_bf16_grads(args):
        cfg["grad_reduce_dtype"] = "bf16"
    if args.get("tp_comm_overlap") == "True":  # TE userbuffers (record column; off is a record's default)
        cfg["tp_comm_overlap"] = 1
    return cfg | _megatron_memory_knobs(args)


def _megatron_memory_knobs(args: dict[str, str]) -> dict[str, Any]:
    """The stack columns a Megatron-LM dump states: attention kernel (--attention-backend, else
    --use-flash-attn) and how full recompute is spread (--recompute-method, --recompute-num-layers)."""
    cfg: dict[str, Any] = {}
    backend = args.get("attention_backend", "").rsplit(".", 1)[-1].lower()
    if backend in _MEG_ATTENTION:
        cfg["attention_kernel"] = _MEG_ATTENTION[backend]
    elif args.get("use_flash_attn") == "True":
        cfg["attention_kernel"] = "flash"
    if args.get("recompute_granularity") == "full" and "recompute_method" in args:
        cfg["recompute_method"] = args["recompute_method"]
        cfg["recompute_num_layers"] = _int_arg(args, "recompute_num_layers") or 1
    return cfg


# Megatron-FSDP's main-gradient dtype as the dump prints it (--megatron-fsdp-main-grads-dtype, Megatron-Core
# 0.17+: a torch dtype, a name, or 'auto' = the compute dtype).
_BF16_NAMES = ("bf16", "bfloat16", "auto")


def _megatron_bf16_grads(args: dict[str, str]) -> bool:
    """Whether a bf16 run's main gradients (accumulation buffer and data-parallel reduction) were bf16.
    Megatron-LM `validate_args`: --grad-reduce-in-bf16 sets accumulate_allreduce_grads_in_fp32 = False, which
    the DDP config takes as grad_reduce_in_fp32; a bf16 run leaves it True otherwise. Megatron-FSDP names its
    own dtype. Only bf16 is returned: fp32 is a record's default (records/workload_spec.py _RECORD_GRAD_DTYPE), so the
    fingerprint of an fp32 run ingested before this column existed is unchanged."""
    if args.get("bf16") != "True":
        return False
    fsdp = "True" in (args.get("use_megatron_fsdp"), args.get("use_custom_fsdp"))
    fsdp_dtype = args.get("megatron_fsdp_main_grads_dtype", "").lower()
    if fsdp and fsdp_dtype:
        return any(name in fsdp_dtype for name in _BF16_NAMES)
    return args.get("accumulate_allreduce_grads_in_fp32") == "False"


def _megatron_recompute(args: dict[str, str]) -> str | None:
    """The recompute mode of the dump: none, full, or selective with its recompute_modules (printed as a Python
    list; Megatron's default ['core_attn'] is autopar's "selective"); None (left to completion) for a module set
    autopar does not model."""
    gran = args.get("recompute_granularity", "none")
    if gran != "selective" or "recompute_modules" not in args:
        return gran
    try:
        mods = ast.literal_eval(args["recompute_modules"])
        return recompute_of_modules(mods)
    except (ValueError, SyntaxError, TypeError):
        return None


def _int_arg(args: dict[str, str], name: str) -> int:
    """An integer argument of the dump (0 when absent); a value that is not one is a DataError naming it."""
    value = args.get(name, "0")
    try:
        return int(value)
    except ValueError:
        raise DataError(f"argument dump: {name} = {excerpt(value)!r} is not an integer") from None


def torchtitan_config(text: str) -> dict[str, Any]:
    """Run-record columns read from a torchtitan log's device-mesh and trainer lines."""
    clean = ANSI.sub("", text)
    cfg: dict[str, Any] = {}
    m = _TT_MESH.search(clean)
    if m:
        names = [n.strip().strip("'\"") for n in m.group(1).split(",") if n.strip()]
        sizes = [int(x) for x in m.group(2).split(",") if x.strip()]
        known = {*_TT_MESH_AXES, *_TT_DP_DIMS}
        if len(names) == len(sizes) and set(names) <= known:  # an unknown dimension: guess nothing
            dims = dict(zip(names, sizes, strict=True))
            cfg["num_gpus"] = math.prod(sizes)
            cfg[Axis.DP.value] = math.prod(dims.get(d, 1) for d in _TT_DP_DIMS)
            cfg.update({name: dims.get(name, 1) for name in _TT_MESH_AXES})
            cfg["zero"] = 3 if dims.get("dp_shard", 1) > 1 else 0  # FSDP2 shards over dp_shard
            if dims.get("dp_shard", 1) > 1 and dims.get("dp_replicate", 1) > 1:  # HSDP: shard within a group
                cfg["dp_shard"] = dims["dp_shard"]
    b = _TT_BATCH.search(clean)
    if b:
        cfg["micro_batch"], cfg["global_batch"], cfg["seq_len"] = (int(g) for g in b.groups())
    if _TT_COMPILE.search(clean):  # its absence proves nothing in a log cut short at the start
        cfg["torch_compile"] = "true"
    if ac := _TT_AC.search(clean):
        cfg["recompute"] = ac.group(1)
    return cfg


def log_config(text: str, fmt: str) -> dict[str, Any]:
    """The run config a log prints about itself ('megatron-log' or 'torchtitan-log')."""
    return megatron_config(text) if fmt == "megatron-log" else torchtitan_config(text)


def merge_log_config(given: dict[str, Any], from_log: dict[str, Any]) -> dict[str, Any]:
    """Flags/sidecar config completed by the log's own; a value that contradicts the log is an error."""
    out = dict(given)
    for key, logged in from_log.items():
        mine = out.get(key)
        if mine in (None, ""):
            out[key] = logged
        elif str(mine).strip().lower() != str(logged).lower():
            raise DataError(f"{key}={mine} (flags/sidecar) but the log itself says {key}={logged}")
    return out
