"""Training steps of a slice on every rank: mixed-precision AdamW (ZeRO-0/1 here, ZeRO-3 through FSDP2),
timing and peak memory.

Model states are what autopar's memory model counts (perf/memory.py). ZeRO-0/1: bf16 weights (2 B), fp32 main
gradients accumulated from each bf16 gradient as soon as it is produced (4 B; the bf16 gradient is freed),
and an fp32 master copy with Adam's two moments (12 B), sharded over dp x cp (experts: over edp) from ZeRO-1.
Each kind of parameter lives in one flat buffer per gradient-sum group, so each group's gradients are summed
with one all-reduce and the updated weights all-gathered with one collective. ZeRO-3: fp32 weights, gradients
and moments all sharded (16 B / shard group), bf16 weights gathered per layer (FsdpStepper).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from autopar.dryrun.comm import Group, Groups, all_gather_flat, all_reduce_, build_groups
from autopar.dryrun.layers import Ctx, Factory
from autopar.dryrun.model import Moe, SliceModel
from autopar.dryrun.plan import SlicePlan

LEARNING_RATE = 1e-4  # any small value: a dry-run measures time and memory, not convergence
SEED = 1234


@dataclass
class Bucket:
    """Parameters whose gradients are summed over the same group: flat weights, fp32 gradients, optimizer."""

    flat: torch.Tensor  # the weights (model dtype), each parameter a view into it
    main: torch.Tensor  # fp32 gradients, same layout
    group: Group  # gradient sum over dp x cp (dense) or edp (experts)
    tp_partial: bool  # also summed over TP
    shard: slice  # the part this rank updates (all of it under ZeRO-0)
    master: torch.Tensor  # fp32 master weights of `shard`
    opt: torch.optim.Optimizer


def _accumulate(p: torch.Tensor) -> None:
    """Move a fresh bf16 gradient into the fp32 main gradient and free it (Megatron's main_grad)."""
    p.main_grad.add_(p.grad)  # type: ignore[attr-defined]  # main_grad: the dry run's fp32 grad buffer view, set below
    p.grad = None


def _bucket(params: list[nn.Parameter], group: Group, tp_partial: bool, zero: int) -> Bucket:
    n = sum(p.numel() for p in params)
    padded = -(-n // group.size) * group.size
    p0 = params[0]
    flat = torch.zeros(padded, dtype=p0.dtype, device=p0.device)
    main = torch.zeros(padded, dtype=torch.float32, device=p0.device)
    off = 0
    for p in params:
        k = p.numel()
        flat[off : off + k].copy_(p.data.flatten())
        p.data = flat[off : off + k].view_as(p)
        p.main_grad = main[off : off + k].view_as(p)  # type: ignore[attr-defined]  # main_grad: the dry run's fp32 grad buffer view
        p.register_post_accumulate_grad_hook(_accumulate)
        off += k
    part = padded // group.size if zero else padded
    shard = slice(group.rank * part, (group.rank + 1) * part) if zero else slice(0, padded)
    master = flat[shard].float().clone().requires_grad_(True)
    opt = torch.optim.AdamW([master], lr=LEARNING_RATE)
    return Bucket(flat, main, group, tp_partial, shard, master, opt)


def build_buckets(model: nn.Module, g: Groups, zero: int) -> list[Bucket]:
    """One bucket per (expert?, summed over TP?) kind present in the model."""
    kinds: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for p in model.parameters():
        kinds.setdefault((p.expert, p.tp_partial), []).append(p)  # type: ignore[attr-defined]  # expert, tp_partial: set in dryrun/layers.py
    return [_bucket(ps, g.edp if ex else g.dpcp, tpp, zero) for (ex, tpp), ps in sorted(kinds.items())]


def sync_grads(buckets: list[Bucket], g: Groups) -> None:
    for b in buckets:
        all_reduce_(b.main, b.group)
        if b.tp_partial:
            all_reduce_(b.main, g.tp)


def optimizer_step(buckets: list[Bucket]) -> None:
    """AdamW on this rank's fp32 shard, then the bf16 weights rebuilt from every rank's shard."""
    for b in buckets:
        b.master.grad = b.main[b.shard]
        b.opt.step()
        b.master.grad = None
        if b.shard.stop - b.shard.start == b.flat.numel():
            b.flat.copy_(b.master)
        else:
            mine = b.master.detach().to(b.flat.dtype)
            all_gather_flat(b.flat, mine, b.group)


def batch(
    plan: SlicePlan, g: Groups, step: int, micro: int, device: torch.device
) -> tuple[torch.Tensor, ...]:
    """This rank's synthetic tokens and targets: its data-parallel samples, its CP chunk of the sequence."""
    d = plan.degrees
    gen = torch.Generator().manual_seed(SEED + 1000 * step + micro)
    shape = (d.dp * plan.micro_batch, plan.seq_len)
    ids, targets = (torch.randint(plan.model.vocab, shape, generator=gen) for _ in range(2))
    dp_rank, chunk = g.dpcp.rank // d.cp, plan.seq_len // d.cp
    rows = slice(dp_rank * plan.micro_batch, (dp_rank + 1) * plan.micro_batch)
    cols = slice(g.cp.rank * chunk, (g.cp.rank + 1) * chunk)
    return ids[rows, cols].to(device), targets[rows, cols].to(device)


class BucketStepper:
    """ZeRO-0/1: the flat buckets above (bf16 weights, fp32 main gradients, sharded fp32 AdamW states)."""

    def __init__(self, model: SliceModel, g: Groups, zero: int):
        self.buckets, self.g = build_buckets(model, g, zero), g

    def zero_grad(self) -> None:
        for b in self.buckets:
            b.main.zero_()

    def sync(self) -> None:
        sync_grads(self.buckets, self.g)

    def step(self) -> None:
        optimizer_step(self.buckets)

    @staticmethod
    def grad(p: nn.Parameter) -> torch.Tensor:
        return p.main_grad  # type: ignore[attr-defined]  # main_grad: the dry run's fp32 grad buffer view


def shard_model(model: SliceModel, g: Groups, param_dtype: torch.dtype) -> None:
    """FSDP2 over dp x cp for every block and the root, experts over their EP replicas (edp); parameters sharded
    in fp32 and gathered in `param_dtype`, gradients reduce-scattered in fp32 (FSDP averages them over the mesh;
    FsdpStepper.sync makes that a sum: the loss is already divided by the step's tokens)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dev = next(model.parameters()).device.type
    dense, experts = (DeviceMesh.from_group(x.pg, dev) for x in (g.dpcp, g.edp))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.blocks:
        if isinstance(block.mlp, Moe):
            fully_shard(block.mlp.experts, mesh=experts, mp_policy=mp)
        fully_shard(block, mesh=dense, mp_policy=mp)
    fully_shard(model, mesh=dense, mp_policy=mp)


class FsdpStepper:
    """ZeRO-3: torch FSDP2 (fully_shard); fp32 sharded weights are the master copy, AdamW steps on the shards."""

    def __init__(self, model: SliceModel, g: Groups, param_dtype: torch.dtype):
        partial = {n for n, p in model.named_parameters() if p.tp_partial}  # type: ignore[attr-defined]  # tp_partial: set in dryrun/layers.py
        shard_model(model, g, param_dtype)
        self.params = list(model.parameters())
        self.tp_partial = [p for n, p in model.named_parameters() if n in partial]
        self.opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        self.g = g

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def sync(self) -> None:
        """FSDP averaged the gradients over its mesh (dp x cp, or edp): make that a sum (set_gradient_divide_factor
        would, with a PREMUL_SUM gloo lacks); those of TP-partial parameters are summed over TP too."""
        for p in self.params:
            if p.grad is not None:
                p.grad.to_local().mul_(p.grad.device_mesh.size())  # type: ignore[attr-defined]  # a DTensor under FSDP2
        for p in self.tp_partial:
            if p.grad is not None:
                all_reduce_(p.grad.to_local(), self.g.tp)  # type: ignore[attr-defined]  # a DTensor under FSDP2

    def step(self) -> None:
        self.opt.step()

    @staticmethod
    def grad(p: nn.Parameter) -> torch.Tensor:
        return p.grad.full_tensor()  # type: ignore[union-attr]  # after backward p.grad is a DTensor


def full_weight(p: nn.Parameter) -> torch.Tensor:
    """A parameter's weights on this rank (gathered from its FSDP shards under ZeRO-3)."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()


def stepper(model: SliceModel, g: Groups, zero: int, param_dtype: torch.dtype) -> BucketStepper | FsdpStepper:
    return FsdpStepper(model, g, param_dtype) if zero == 3 else BucketStepper(model, g, zero)


def train_step(
    model: SliceModel, st: BucketStepper | FsdpStepper, plan: SlicePlan, g: Groups, step: int
) -> float:
    """One optimizer step (gradient accumulation over the plan's micro-batches); the step's mean loss."""
    device = plan_device(plan, g)
    st.zero_grad()
    loss = torch.zeros((), device=device)
    for micro in range(plan.degrees.micro_batches):
        ids, targets = batch(plan, g, step, micro, device)
        part = model(ids, targets, plan.tokens_per_step)
        part.backward()
        loss += part.detach()
    st.sync()
    st.step()
    return float(all_reduce_(loss, g.dpcp))


def plan_device(plan: SlicePlan, g: Groups) -> torch.device:
    """This rank's device (rank r of a GPU run uses GPU r: one host)."""
    return torch.device("cuda", g.world.rank) if plan.device == "cuda" else torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(device: torch.device) -> dict[str, str | float | None]:
    """GPU: torch's peak allocated and reserved bytes. CPU: the process's peak resident set (whole process:
    interpreter and torch included), labelled as such."""
    if device.type == "cuda":
        return {
            "device_name": torch.cuda.get_device_name(device),
            "max_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "max_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30,
            "cpu_peak_rss_gib": None,
        }
    import resource  # POSIX; ru_maxrss is in KiB on Linux, in bytes on macOS

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {
        "device_name": "cpu",
        "max_allocated_gib": None,
        "max_reserved_gib": None,
        "cpu_peak_rss_gib": rss / 2**30,
    }


def measure(plan: SlicePlan, g: Groups, device: torch.device, steps: int, warmup: int) -> dict[str, Any]:
    """Warm-up steps, then `steps` timed steps: their times, the last loss and the peak memory."""
    zero = plan.degrees.zero
    dtype = torch.float32 if zero == 3 else torch.bfloat16  # FSDP2 keeps fp32 shards, gathers bf16
    model = SliceModel(Factory(SEED, dtype, device, False), plan.model, _ctx(plan, g))
    st = stepper(model, g, zero, torch.bfloat16)
    times, loss = [], float("nan")
    for step in range(warmup + steps):
        if step == warmup and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        t0 = time.perf_counter()
        loss = train_step(model, st, plan, g, step)
        _sync(device)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    return {
        "step_times_s": times,
        "median_step_s": statistics.median(times),
        "loss": loss,
        **peak_memory(device),
    }


def _ctx(plan: SlicePlan, g: Groups) -> Ctx:
    return Ctx(g, plan.degrees.sp, plan.degrees.recompute)


def rank_groups(rank: int, world: int, plan: SlicePlan) -> Groups:
    d = plan.degrees
    return build_groups(rank, world, d.tp, d.cp, d.ep)
