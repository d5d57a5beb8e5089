"""Training-log parsers (Megatron-LM, torchtitan): per-step samples, warm-up skip, one aggregated record.

Formats (checked against the frameworks' source):
- Megatron-LM ``training_log`` (megatron/training/training.py) prints, every ``--log-interval``
  iterations, `` [2025-08-01 07:19:37] iteration       10/     100 | consumed samples: ... |
  elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 400.1 | learning rate:
  ... | global batch size:   512 | lm loss: ... |``; the timestamp and throughput fields are optional
  (older versions, ``--log-throughput`` off). ``report_memory`` prints
  ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... |
  max reserved: ...`` (MB = 2**20 bytes), sometimes two ranks' lines run together on one line.
- torchtitan ``MetricsProcessor.log`` (torchtitan/components/metrics.py) prints, through the
  ``[titan] <time> - root - INFO - `` logger and with ANSI colours unless disabled,
  ``step: 10  loss:  7.9  grad_norm:  1.2  memory: 45.12GiB(47.49%)  tps: 5,762  tflops: 334.10
  mfu: 33.78%`` (memory = max reserved, GiB; tps = tokens/s per GPU). Older versions print ``wps``.

The run's config is read from the log itself where the framework prints it (`log_config`):
- Megatron-LM prints its parsed arguments between ``---- arguments ----`` and ``---- end of arguments ----``
  (``  tensor_model_parallel_size ...... 2``; ``None`` = unset) and ``using world size: 8, data-parallel
  size: 4, ...``; `MEGATRON_ARGS` maps the argument names onto run-record columns.
- torchtitan logs ``Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]`` and ``Trainer is
  initialized with local batch size 8, global batch size 64, ..., sequence length 2048`` (older:
  ``Training starts at step 1, with local batch size 1, global batch size 8, sequence length 8192``).
A value given by flags or a sidecar that contradicts the log is an error (`merge_log_config`).
Real excerpts these parsers are checked on: tests/fixtures/logs/PROVENANCE.md.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from autopar.errors import DataError
from autopar.knobs import recompute_of_modules
from autopar.layouts import Axis
from autopar.text import excerpt

LOG_FORMATS = ("megatron-log", "torchtitan-log")
# What a log record cannot do without (besides the model): the throughput needs the GPU, the GPU count
# and the tokens per step; neither framework prints the GPU's catalog name, so it comes from flags.
LOG_REQUIRED = ("gpu", "num_gpus", "seq_len", "global_batch")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
_MEG_MEM = re.compile(
    rf"\[Rank (\d+)\] \(after (\d+) iterations\) memory \((MB|GB)\) \| allocated: ({_NUM}) \| "
    rf"max allocated: ({_NUM}) \| reserved: ({_NUM}) \| max reserved: ({_NUM})"
)
_TT_STEP = re.compile(r"(?<![\w])step:\s*(\d+)\s+(.*)$")
_TT_MEM = re.compile(rf"memory:\s*({_NUM})\s*GiB\(({_NUM})%\)")
_TT_FIELD = re.compile(rf"\b(loss|grad_norm|tps|wps|tflops|mfu):\s*({_NUM})")


def _num(text: str) -> float:
    """A logged number ('1,234.5'); a non-finite one is a damaged line (ValueError, reported by parse_log)."""
    x = float(text.replace(",", ""))
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {text!r}")
    return x


@dataclass
class LogSamples:
    """Per-logged-step measurements read from one log, in log order."""

    framework: str
    steps: list[int] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # Megatron: elapsed time per iteration
    tokens_per_s_per_gpu: list[float] = field(default_factory=list)  # torchtitan tps
    tflops: list[float] = field(default_factory=list)
    mfu: list[float] = field(default_factory=list)  # fraction
    mem_gib: list[float] = field(default_factory=list)  # per step (torchtitan) or per rank report
    global_batch: int | None = None
    train_iters: int | None = None

    def __len__(self) -> int:
        return len(self.steps)


def sniff_log_format(text: str) -> str | None:
    """'megatron-log' or 'torchtitan-log' if the text holds that framework's step lines, else None."""
    clean = _ANSI.sub("", text)
    if re.search(r"iteration\s+\d+\s*/\s*\d+\s*\|.*elapsed time per iteration \(ms\)", clean):
        return "megatron-log"
    if re.search(r"step:\s*\d+\s.*\b(tps|wps):\s*[\d,]+", clean):
        return "torchtitan-log"
    return None


def _fields(rest: str) -> dict[str, str]:
    """'| key: value |' pairs of a Megatron line."""
    out: dict[str, str] = {}
    for part in rest.split("|"):
        if ":" in part:
            k, _, v = part.rpartition(":")
            out[k.strip()] = v.strip()
    return out


def _count(value: str | None, iteration: str) -> float:
    """A count field of an iteration line (0 when absent); not a number is a one-line DataError (int() of an
    'inf' a fuzzed log held overflowed)."""
    try:
        return float(value or 0)
    except ValueError:
        raise DataError(
            f"megatron-log: iteration {iteration}: number of nan iterations={excerpt(value or '')!r} is not a number"
        ) from None


def parse_megatron_log(text: str) -> LogSamples:
    """Every iteration line (and the memory report lines) of a Megatron-LM log."""
    s = LogSamples(framework="Megatron-LM")
    for m in _MEG_MEM.finditer(text):
        scale = 1 / 1024 if m.group(3) == "MB" else 1.0  # MB here means MiB
        s.mem_gib.append(_num(m.group(7)) * scale)
    for line in _ANSI.sub("", text).splitlines():
        m = _MEG_ITER.search(line)
        if not m:
            continue
        f = _fields(m.group(3))
        ms = f.get("elapsed time per iteration (ms)")
        if ms is None:
            continue
        if _count(f.get("number of nan iterations"), m.group(1)) > 0:
            continue  # a step that produced NaN is not a timing sample
        if _num(ms) <= 0:
            raise DataError(
                f"megatron-log: iteration {m.group(1)}: elapsed time per iteration (ms)={ms!r}: must be > 0"
            )
        s.steps.append(int(m.group(1)))
        s.train_iters = int(m.group(2))
        s.step_s.append(_num(ms) / 1000.0)
        if "throughput per GPU (TFLOP/s/GPU)" in f:
            s.tflops.append(_num(f["throughput per GPU (TFLOP/s/GPU)"]))
        for key in ("tokens per GPU (tokens/s/GPU)", "Tokens per second per GPU (Tok/s/GPU)"):
            if key in f:
                s.tokens_per_s_per_gpu.append(_num(f[key]))
        if "global batch size" in f:
            gb = int(_num(f["global batch size"]))
            if s.global_batch is not None and gb != s.global_batch:
                raise DataError(
                    f"Megatron log changes global batch size ({s.global_batch} -> {gb}) at "
                    f"iteration {s.steps[-1]}: batch ramp-up logs cannot be one record"
                )
            s.global_batch = gb
    return s


def parse_torchtitan_log(text: str) -> LogSamples:
    """Every training step line of a torchtitan log (validation lines skipped, colours stripped)."""
    s = LogSamples(framework="torchtitan")
    by_step: dict[int, dict[str, list[float]]] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        m = _TT_STEP.search(line)
        if not m or "validate step:" in line:
            continue
        rest = m.group(2)
        vals = {k: _num(v) for k, v in _TT_FIELD.findall(rest)}
        tps = vals.get("tps", vals.get("wps"))
        if tps is None:
            continue
        d = by_step.setdefault(int(m.group(1)), {"tps": [], "tflops": [], "mfu": [], "mem": []})
        d["tps"].append(tps)
        if "tflops" in vals:
            d["tflops"].append(vals["tflops"])
        if "mfu" in vals:
            d["mfu"].append(vals["mfu"] / 100.0)
        mm = _TT_MEM.search(rest)
        if mm:
            d["mem"].append(_num(mm.group(1)))
    for step in sorted(by_step):  # several ranks may log the same step: mean rate, max memory
        d = by_step[step]
        s.steps.append(step)
        s.tokens_per_s_per_gpu.append(statistics.fmean(d["tps"]))
        if d["tflops"]:
            s.tflops.append(statistics.fmean(d["tflops"]))
        if d["mfu"]:
            s.mfu.append(statistics.fmean(d["mfu"]))
        if d["mem"]:
            s.mem_gib.append(max(d["mem"]))
    return s


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
    every = _megatron_args(_ANSI.sub("", text))
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
    own dtype. Only bf16 is returned: fp32 is a record's default (records._RECORD_GRAD_DTYPE), so the
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
    clean = _ANSI.sub("", text)
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


def warmup_count(n: int, warmup: int | None) -> int:
    """How many leading logged steps to drop: `warmup` if given, else 10% (at least 1 of 2+)."""
    if warmup is not None:
        if warmup < 0:
            raise DataError(f"--warmup={warmup} must be >= 0")
        return warmup
    return 0 if n < 2 else max(1, math.ceil(0.1 * n))


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of a non-empty list."""
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _summary(prefix: str, xs: list[float]) -> dict[str, float]:
    """Median plus p10/p90 of a series under `prefix`, `prefix`_p10, `prefix`_p90."""
    if not xs:
        return {}
    return {
        prefix: statistics.median(xs),
        f"{prefix}_p10": _quantile(xs, 0.1),
        f"{prefix}_p90": _quantile(xs, 0.9),
    }


# What a training log prints when a GPU runs out of memory: PyTorch's torch.OutOfMemoryError ("CUDA out of
# memory. Tried to allocate ..."), the CUDA runtime's own error, the kernel's OOM killer. One pattern for log
# ingest and `tune`'s runners.
OOM_TEXT = re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory|oom-kill", re.IGNORECASE)


def oom_record(samples: LogSamples, config: dict[str, Any], text: str) -> dict[str, Any] | None:
    """A run that ran out of memory before its first logged step, as a record (issue 44: a measured OOM is
    evidence the memory model learns from): its configuration and measured_oom; None when the log has step
    lines or no out-of-memory error."""
    if len(samples) or not OOM_TEXT.search(text):
        return None
    rec: dict[str, Any] = dict(config)
    rec.setdefault("framework", samples.framework)
    rec["measured_oom"] = True
    note = f"parsed from {samples.framework} log: out of memory before its first logged step"
    rec["notes"] = f"{rec['notes']}; {note}" if rec.get("notes") else note
    return rec


def aggregate(samples: LogSamples, config: dict[str, Any], *, warmup: int | None = None) -> dict[str, Any]:
    """One run record from a log: config columns + median (p10/p90) of the post-warm-up steps."""
    n = len(samples)
    if n == 0:
        raise DataError(f"no {samples.framework} step lines found in the log")
    skip = warmup_count(n, warmup)
    if skip >= n:
        raise DataError(f"--warmup={skip} skips all {n} logged steps of the {samples.framework} log")
    rec: dict[str, Any] = dict(config)
    if samples.global_batch is not None:
        given = rec.get("global_batch")
        if given not in (None, "") and int(given) != samples.global_batch:
            raise DataError(
                f"global_batch={given} but the Megatron log says global batch size {samples.global_batch}"
            )
        rec["global_batch"] = samples.global_batch
    rec.setdefault("framework", samples.framework)
    step_s = samples.step_s[skip:]
    tflops = samples.tflops[skip:] if len(samples.tflops) == n else []
    tps = samples.tokens_per_s_per_gpu[skip:] if len(samples.tokens_per_s_per_gpu) == n else []
    mfu = samples.mfu[skip:] if len(samples.mfu) == n else []
    rec.update(_summary("measured_step_s", step_s))
    if not tps and step_s:
        tps = _derived_tps(rec, step_s)
    rec.update(_summary("measured_tokens_per_s_per_gpu", tps))
    if tflops:
        rec["measured_tflops_per_gpu"] = statistics.median(tflops)
    if mfu:
        rec["measured_mfu"] = statistics.median(mfu)
    if samples.framework == "torchtitan":
        mem = samples.mem_gib[skip:] if len(samples.mem_gib) == n else samples.mem_gib
    else:
        mem = samples.mem_gib
    if mem:
        rec["measured_mem_gb_per_gpu"] = max(mem)  # GiB, max reserved, as torchtitan reports it
        rec["memory_metric"] = (
            "max_memory_reserved"  # both logs' figure is the caching allocator's reserved peak
        )
    rec["log_steps_used"] = n - skip
    rec["log_warmup_skipped"] = skip
    rec["log_first_step"] = samples.steps[skip]
    rec["log_last_step"] = samples.steps[-1]
    how = "median of post-warm-up steps; spread in *_p10/*_p90"
    if samples.framework == "torchtitan":
        how += "; memory = max reserved GiB (torchtitan)"
    elif mem:
        how += "; memory = max 'max reserved' over ranks, GiB"
    note = f"parsed from {samples.framework} log: {n - skip} of {n} steps after {skip} warm-up; {how}"
    rec["notes"] = f"{rec['notes']}; {note}" if rec.get("notes") else note
    return rec


def _derived_tps(rec: dict[str, Any], step_s: list[float]) -> list[float]:
    """Tokens/s per GPU from step times and the config (empty when a needed value is missing or not > 0;
    the row validation then names the field)."""
    try:
        tokens = float(rec["global_batch"]) * float(rec["seq_len"])
        gpus = float(rec["num_gpus"])
    except (KeyError, TypeError, ValueError):
        return []
    if not (tokens > 0 and gpus > 0 and math.isfinite(tokens * gpus)):
        return []
    return [tokens / t / gpus for t in step_s]


def parse_log(text: str, fmt: str) -> LogSamples:
    """Dispatch to the parser of `fmt` ('megatron-log' or 'torchtitan-log')."""
    parsers = {"megatron-log": parse_megatron_log, "torchtitan-log": parse_torchtitan_log}
    if fmt in parsers:
        try:
            return parsers[fmt](text)
        except ValueError as e:  # a damaged or truncated line: one line naming it, not a traceback
            if isinstance(e, DataError):
                raise
            raise DataError(f"{fmt}: a logged value could not be read ({e})") from None
    raise DataError(f"unknown log format '{fmt}' (allowed: {', '.join(LOG_FORMATS)})")
