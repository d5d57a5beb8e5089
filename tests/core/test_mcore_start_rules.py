"""Layouts Megatron-Core refuses at start-up, which the megatron search must neither offer nor price.

Sources (NVIDIA/Megatron-LM, the pinned releases core_v0.17.1 to core_v0.19.0):
- optimizer savers: megatron/training/arguments.py validate_args asserts `args.use_precision_aware_optimizer`
  when `args.optimizer_cpu_offload` (core_v0.19.0 lines 1803-1807, core_v0.17.1 lines 1496-1500), and
  megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__ asserts
  `use_distributed_optimizer` when `use_precision_aware_optimizer` (core_v0.19.0 lines 430-436); bf16 Adam
  moments (--exp-avg-dtype bf16) run through the same precision-aware optimizer. So both need ZeRO >= 1
  (Megatron-FSDP sets use_distributed_optimizer itself, arguments.py:1106-1112).
- flex dispatcher (the launch's backend choice): megatron/core/transformer/moe/token_dispatcher.py
  MoEFlexTokenDispatcher.__init__ asserts
  `self.tp_size * self.ep_size > 1, "DeepEP dispatcher requires TPxEP > 1"` (core_v0.19.0 line 1770,
  core_v0.17.1 line 1365), its tp_size being the expert TP group (MoETokenDispatcher.__init__:
  `self.tp_group = pg_collection.expt_tp`); the HybridEP branch has no such assert.
- HSDP: megatron/core/parallel_state.py (below).
"""

from __future__ import annotations

import numpy as np
import pytest

from autopar.catalog import get_gpu, get_model
from autopar.errors import InvalidStrategyError
from autopar.launch.schema import VERSIONS, check_megatron
from autopar.launch.settings import launch_settings
from autopar.layouts import (
    Level,
    ParallelDims,
    check,
    dp_shard_rules,
    dp_shard_values,
    expert_degrees,
    flex_backend,
    hsdp_degree,
    optimizer_saver_rules,
    saver_runs_with,
)
from autopar.perf import estimate
from autopar.perf.vector import estimate_columns
from autopar.search import build_space
from autopar.specs import ClusterSpec, Strategy, Workload

DENSE = get_model("Llama-3-8B")
MOE = get_model("Qwen3-30B-A3B")
H100 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
GB200 = ClusterSpec(gpu=get_gpu("GB200"), num_gpus=64)
SAVERS = ("bf16_states", "offload")


# ------------------------------------------------------------------------------------------ optimizer savers


@pytest.mark.parametrize(
    ("zero", "states", "offload", "refused"),
    [
        (0, "bf16", 0.0, True),  # precision-aware optimizer without the distributed optimizer
        (0, None, 1.0, True),  # CPU offload: precision-aware optimizer, hence the distributed optimizer
        (0, "bf16", 0.5, True),
        (0, None, 0.0, False),  # no saver: plain DDP runs
        (1, "bf16", 1.0, False),  # --use-distributed-optimizer
        (2, None, 1.0, False),  # Megatron-FSDP turns the distributed optimizer on
        (3, "bf16", 0.0, False),
    ],
)
def test_megatron_savers_need_the_distributed_optimizer(zero, states, offload, refused):
    got = list(optimizer_saver_rules("megatron", zero, states, offload))
    assert bool(got) is refused
    assert all(v.level == Level.HARD for v in got)
    assert saver_runs_with("megatron", zero, (states, offload)) is not refused
    # other stacks keep their own rules (torchtitan/fsdp ship no such savers: stack_rules says so)
    assert not list(optimizer_saver_rules("torchtitan", zero, states, offload))


def test_check_rejects_a_zero0_saver_on_megatron_only():
    wl = Workload(seq_len=4096, global_batch=64)
    s = Strategy(tp=2, pp=1, micro_batch=1, recompute="none", zero=0, optimizer_states="bf16")
    msgs = [v.message for v in check(DENSE, H100, wl, s, level=Level.HARD)]
    assert any("needs zero >= 1" in m for m in msgs)
    with pytest.raises(InvalidStrategyError, match="needs zero >= 1"):
        estimate(DENSE, H100, wl, s, strict=False)
    ok = s.model_copy(update={"zero": 1})
    assert not [v for v in check(DENSE, H100, wl, ok, level=Level.HARD)]


def _saver_space(framework: str = "megatron"):
    wl = Workload(seq_len=4096, global_batch=64, memory_savers=SAVERS, framework=framework)
    return wl, build_space(DENSE, H100, wl)


def test_search_space_never_offers_a_zero0_saver():
    _, space = _saver_space()
    seen = set()
    for lay in space.layouts:
        strategies = [lay.strategy(j) for j in range(lay.size)]
        keys = {(s.zero, s.dp_shard, s.optimizer_states, s.optimizer_offload, s.micro_batch, s.vpp,
                 s.sp, s.recompute, s.cp_comm, s.activation_offload_layers) for s in strategies}  # fmt: skip
        assert len(keys) == lay.size  # one strategy per index, none repeated
        for s in strategies:
            seen.add((s.zero, s.optimizer_states, s.optimizer_offload))
    assert not {x for x in seen if x[0] == 0 and (x[1] or x[2])}
    # every other saver still offered: with ZeRO >= 1, and ZeRO-0 without savers
    assert {(1, "bf16", 1.0), (3, None, 1.0), (0, None, 0.0)} <= seen


def test_saver_space_arrays_equal_the_scalar_strategies():
    wl, space = _saver_space()
    for block in space.column_blocks(2048):
        cols = block.columns
        vest = estimate_columns(DENSE, H100, wl, cols)
        for i in range(0, len(cols.zero), 11):
            s = space.point(block.start + i).strategy
            assert cols.zero[i] == s.zero and cols.optimizer_offload[i] == s.optimizer_offload
            e = estimate(DENSE, H100, wl, s, check=False)
            assert vest.tokens_per_s_per_gpu[i] == pytest.approx(e.tokens_per_s_per_gpu, rel=1e-9)
        assert not np.any((cols.zero == 0) & ((cols.optimizer_offload > 0) | (cols.optimizer_states >= 0)))


def test_launch_writes_the_precision_aware_optimizer_with_the_offload():
    wl = Workload(seq_len=4096, global_batch=64, memory_savers=SAVERS)
    s = Strategy(tp=2, pp=1, micro_batch=1, recompute="none", zero=1, optimizer_offload=1.0)
    ls = launch_settings(DENSE, H100, wl, s)
    assert "--use-precision-aware-optimizer" in ls.megatron_args
    assert "--optimizer-cpu-offload" in ls.megatron_args
    for version in VERSIONS["megatron"]:
        assert check_megatron(ls.megatron_args, version, list(ls.placeholders)) == []
    # what check_megatron says of the combinations Megatron refuses
    base = [a for a in ls.megatron_args if a != "--use-precision-aware-optimizer"]
    assert any("needs --use-precision-aware-optimizer" in p for p in check_megatron(base, "core_v0.19.0"))
    ddp = [a for a in ls.megatron_args if not a.startswith("--use-distributed-optimizer")]
    ddp = [a for a in ddp if not a.startswith("--overlap-param-gather")]
    assert any("needs --use-distributed-optimizer" in p for p in check_megatron(ddp, "core_v0.19.0"))


# ------------------------------------------------------------------------------------------ flex dispatcher


def test_flex_backend_runs_the_layout():
    assert flex_backend(H100, 1, 8) == "deepep"  # one 8-GPU host per NVLink domain
    assert flex_backend(H100, 2, 1) == "deepep"  # expert TP alone makes the group
    assert flex_backend(H100, 1, 1) == "hybridep"  # DeepEP would assert TPxEP > 1
    assert flex_backend(GB200, 1, 8) == "hybridep"  # NVL72 spans 4-GPU hosts


def test_tp1_ep1_with_flex_is_searched_and_launched_with_hybridep():
    dims = ParallelDims(16, 1, 1, 1, 16)
    assert (1, 1) in expert_degrees(MOE, H100, dims, "megatron")
    wl = Workload(seq_len=4096, global_batch=64, moe_dispatcher="flex")
    s = Strategy(tp=1, pp=1, ep=1, etp=1, micro_batch=1, recompute="none", zero=3)
    ls = launch_settings(MOE, H100, wl, s)
    assert "--moe-flex-dispatcher-backend hybridep" in ls.megatron_args
    for version in VERSIONS["megatron"]:
        assert check_megatron(ls.megatron_args, version, list(ls.placeholders)) == []
    # what check_megatron says of DeepEP there
    deepep = [a.replace("hybridep", "deepep") for a in ls.megatron_args]
    assert any("deepep needs expert tp x ep > 1" in p for p in check_megatron(deepep, "core_v0.17.1"))
    ok = launch_settings(MOE, H100, wl, s.model_copy(update={"ep": 8, "zero": 1}))
    assert "--moe-flex-dispatcher-backend deepep" in ok.megatron_args


# ------------------------------------------------------------------------------------------ HSDP and experts
# megatron/core/parallel_state.py initialize_model_parallel asserts "Expert data parallel size should be
# divisible by partial DistOpt shard factor" (line 1449 at core_v0.19.0, 1269 at core_v0.17.1): the
# dp/dp_shard HSDP replicas (--num-distributed-optimizer-instances) must divide edp = tp*cp*dp / (ep*etp).

H100_64 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)


@pytest.mark.parametrize(("ep", "refused"), [(8, False), (4, False), (16, True), (64, True)])
def test_hsdp_replicas_divide_the_expert_data_parallel_degree(ep, refused):
    # TP1 DP64 on 8-GPU nodes: HSDP shards over 8 (one node), so 8 replicas; edp = 64 / ep
    dims = ParallelDims(64, 1, 1, 1, 64, 1, ep, 1)
    assert hsdp_degree(H100_64, dims) == 8
    got = list(dp_shard_rules(H100_64, dims, 3, 8, "megatron"))
    assert bool(got) is refused and all(v.level == Level.HARD for v in got)
    assert not list(dp_shard_rules(H100_64, dims, 3, 8, "torchtitan"))  # its own mesh rules, not these
    wl = Workload(seq_len=4096, global_batch=256)
    assert dp_shard_values(H100_64, wl, dims) == (() if refused else (8,))


def test_search_offers_hsdp_only_where_the_expert_mesh_splits():
    wl = Workload(seq_len=4096, global_batch=256)
    space = build_space(MOE, H100_64, wl)
    flat = [lay for lay in space.layouts if lay.tp == lay.cp == lay.pp == 1 and lay.etp == 1]
    offered = {lay.ep: lay.dp_shard for lay in flat}
    assert offered[8] == (8,) and offered[16] == () and offered[64] == ()
    s = Strategy(tp=1, pp=1, ep=16, etp=1, micro_batch=1, recompute="none", zero=3, dp_shard=8)
    with pytest.raises(InvalidStrategyError, match="expert data-parallel"):
        estimate(MOE, H100_64, wl, s, strict=False)
