"""Defaults shared by the CLI and the Python API (one source of truth for each).

The default problem is the README's: Llama-3.1-70B on 64 H100-SXM, sequence 8192, global batch 512.
"""

from __future__ import annotations

DEFAULT_MODEL = "Llama-3.1-70B"
DEFAULT_GPU = "H100-SXM"
DEFAULT_GPUS = 64
DEFAULT_SEQ_LEN = 8192
DEFAULT_GLOBAL_BATCH = 512
DEFAULT_PRECISION = "bf16"
DEFAULT_FRAMEWORK = "megatron"  # the software stack a problem is estimated for unless --framework says
# Distinct strategies per search. 600 rather than 300 since the space gained schedules, CP variants, HSDP and
# uneven splits (default problem 38k -> 93k points): over seeds 0-6 the fastest point found at 300 was up to
# 17% below the exhaustive best (2 of 7 seeds >15%), at 600 within 4.3% for every seed, at ~0.8 s of search.
DEFAULT_BUDGET = 600
# How a search runs (autopar/search/hybrid.py): an exact sweep on arrays up to a million points, else NSGA-II
# over layouts (hardware, tp/pp/cp/ep) with every other knob solved exactly; with --storage, NSGA-II.
# Replaces plain NSGA-II as the default: at budget 600 its fastest point was 1.7-4.2% below the exhaustive
# best on the benchmark problems (hypervolume ratio 0.88-0.96 at budget 300).
DEFAULT_SAMPLER = "auto"
DEFAULT_WHATIF_BUDGET = 300  # per hardware option of a what-if (each option is a search of its own)
# Largest GPU count `whatif --deadline` sizing tries for a GPU type given without counts (`--max-gpus`):
# 16,384 GPUs, the scale of the largest published dense runs (Llama 3 405B trained on 16K H100s).
DEFAULT_SIZING_MAX_GPUS = 16384
DEFAULT_SEED = 0
DEFAULT_TIER = "on_demand"  # the price tier $/Mtoken and a what-if use unless --tier says
# Share of NSGA-II trials after exploration that are one-knob moves from the front (search/loops.py).
LOCAL_SEARCH_SHARE = 0.7
# What the search optimises unless --objectives says. Free memory is a constraint by default (the memory band's
# upper end plus --min-headroom must fit), not an objective: as an objective it kept extremes no one runs (512
# GPUs at 50k tokens/s with 180 GiB free, issue 46); `--objectives throughput,headroom,cost` asks for it.
DEFAULT_OBJECTIVES = ("throughput", "cost")
# Free memory a strategy must leave per GPU on top of the memory band's upper end (search/margin.py), which
# is the margin for the memory model's own error since issue 21 (it was a fixed 2 GiB before). 0: the band,
# fitted on measured peaks and scored on runs left out, already holds what the model is known to miss; a
# fixed amount on top would count that error twice. Users add one with --min-headroom (e.g. for a profiler
# or a checkpoint writer the model does not know about).
DEFAULT_MIN_HEADROOM_GIB = 0.0
# Whether a fit must hold at the memory band's upper end (search/margin.py) on the stacks whose measured peaks
# the band was fitted on. The shipped band (20 torchtitan peaks) is x1.174 at its 90% upper end (README "Memory
# margin" has its coverage). Stacks it never saw keep the fixed 2 GiB (search/margin.py FIXED_MARGIN_GIB): at
# x1.174, 41 of 313 measured runs that ran would not fit, 12 of them Megatron-Bridge runs (Megatron-Core peaks
# are measured nowhere we have; the Zero Bubble rows, bench/data/memory_runs.csv, validate legacy Megatron-LM's
# pipeline accounting only). --no-memory-band --min-headroom 2GiB: the fixed margin everywhere, as before issue 21.
DEFAULT_MEMORY_BAND = True
# How an HTML report loads plotly.js (autopar/reports/plotlyjs.py): inlined partial bundle, or the CDN.
PLOTLY_MODES = ("inline", "cdn")
# Overlaps a stack turns on in its own published training recipes, used when the user does not say
# (`--tp-comm-overlap` / `--no-tp-comm-overlap`). Megatron-Core as NVIDIA runs it (Megatron-Bridge
# performance recipes) overlaps TP collectives with GEMMs through Transformer Engine userbuffers whenever
# TP > 1: scripts/performance/configs/llama/llama3_llm_pretrain.py (commit 2a0d46e) sets
# `CommOverlapConfig(tp_comm_overlap=bool(tensor_model_parallel_size > 1))` on every system, and the
# library recipes (src/megatron/bridge/recipes/llama/llama3.py) carry a CommOverlapConfig with
# tp_comm_overlap=True for the TP > 1 models; NeMo 2 did the same (MegatronCommOverlapCallback,
# calibration/records/workload_spec.py _nemo_tp_overlap). Megatron-LM's own argument defaults to off (megatron-legacy),
# as do torchtitan's async TP (parallelism.enable_async_tensor_parallel = false), FSDP and DeepSpeed.
# DP grad-reduce / param-gather overlap is on in the model for every stack already (perf/comm.py dp_time);
# MoE dispatch/combine overlap stays off: the Megatron-Bridge DeepSeek-V3 H100/GB200/B200 BF16 and FP8-CS
# presets set moe_a2a_overlap=False (scripts/performance/configs/deepseek/deepseek_workload_base_configs.py,
# commit 0426418); only some MXFP8 Blackwell presets turn it on.
TP_COMM_OVERLAP_BY_STACK: dict[str, bool] = {"megatron": True}


def tp_comm_overlap_default(framework: str, stated: bool | None = None) -> bool:
    """The TP comm overlap a run on `framework` uses: what the user stated, else the stack's recipe default."""
    return TP_COMM_OVERLAP_BY_STACK.get(framework, False) if stated is None else stated


# Main-gradient buffer / DP reduction dtype a stack's published training recipes use when the user does not say
# (`--grad-reduce-dtype`). Megatron-Core as NVIDIA runs it reduces in bf16: Megatron-Bridge's performance configs
# set mixed_precision.grad_reduce_in_fp32 = ddp.grad_reduce_in_fp32 = False for every model family they
# benchmark (scripts/performance/configs/<family>/<family>_llm_pretrain.py `set_<family>_common_configs`, tags
# v0.2.0 717c62d to v0.5.0 fcbb603; from v0.6.0 perf_recipes/_common.py `_benchmark_common`), as NeMo 2's
# performance recipes did from 25.04 (`pretrain_performance_optimizations`: plugins.grad_reduce_in_fp32 = False);
# Megatron-Core >= 0.17 also defaults Megatron-FSDP's main gradients to the parameters' dtype. Megatron-LM's own
# argument default (accumulate and reduce in fp32 for bf16 training: megatron-legacy), torchtitan's FSDP2
# reduce dtype, DeepSpeed and plain FSDP stay fp32 (calibration/records/workload_spec.py states fp32 for runs that do not say).
GRAD_REDUCE_DTYPE_BY_STACK: dict[str, str] = {"megatron": "bf16"}


def grad_reduce_dtype_default(framework: str, stated: str | None = None) -> str:
    """The main-gradient dtype a run on `framework` uses: what the user stated, else the stack's recipe default."""
    return GRAD_REDUCE_DTYPE_BY_STACK.get(framework, "fp32") if stated is None else stated
