"""The numerical check of the parallel layers: a slice's loss and summed gradients against the same model
built unsharded on one rank (every weight drawn from a generator keyed by its name, so both hold the same
model), on the same tokens, in fp32. The collectives are right when the two agree to rounding."""

from __future__ import annotations

from typing import Any

import torch

from autopar.dryrun.comm import Group, Groups, all_reduce_
from autopar.dryrun.layers import Ctx, Factory
from autopar.dryrun.model import SliceModel
from autopar.dryrun.plan import SlicePlan
from autopar.dryrun.train import LEARNING_RATE, SEED, batch, full_weight, stepper

ALONE = Group(None, 1, 0)


def _reference(plan: SlicePlan, device: torch.device) -> tuple[float, SliceModel]:
    """Loss of the unsharded model on the whole step's tokens, and the model (gradients filled)."""
    alone = Groups(*(ALONE,) * 6)
    f = Factory(SEED, torch.float32, device, True)
    model = SliceModel(f, plan.model, Ctx(alone, False, plan.degrees.recompute))
    gen = torch.Generator().manual_seed(SEED)  # the same draw as train.batch for step 0, micro 0
    shape = (plan.degrees.dp * plan.micro_batch, plan.seq_len)
    ids, targets = (torch.randint(plan.model.vocab, shape, generator=gen).to(device) for _ in range(2))
    loss = model(ids, targets, plan.tokens_per_step)
    loss.backward()
    return float(loss.detach()), model


def _worst(pairs: list[tuple[str, torch.Tensor, torch.Tensor]]) -> tuple[float, str]:
    """Largest |got - want| relative to max |want| over (name, got, want) triples, and where."""
    errs = [
        (float((got - want).abs().max() / want.abs().max().clamp_min(1e-30)), n) for n, got, want in pairs
    ]
    return max(errs)


def check_layers(plan: SlicePlan, g: Groups, device: torch.device) -> dict[str, Any]:
    """This rank's loss, and its worst relative gradient error and (after one AdamW step on each side, which
    checks the ZeRO shards and the weight gathers) weight error against the reference."""
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 on GPUs too
    torch.backends.cudnn.allow_tf32 = False
    f = Factory(SEED, torch.float32, device, True)
    model = SliceModel(f, plan.model, Ctx(g, plan.degrees.sp, plan.degrees.recompute))
    names = {n: p.full_name for n, p in model.named_parameters()}  # type: ignore[attr-defined]  # full_name: the dry run's own Parameter attribute (dryrun/layers.py)
    st = stepper(model, g, plan.degrees.zero, torch.float32)
    st.zero_grad()
    ids, targets = batch(plan, g, 0, 0, device)
    loss = model(ids, targets, plan.tokens_per_step)
    loss.backward()
    st.sync()
    total = float(all_reduce_(loss.detach().clone(), g.dpcp))
    ref_loss, ref = _reference(plan, device)
    refs = {p.full_name: p for p in ref.parameters()}  # type: ignore[attr-defined]  # full_name: the dry run's own Parameter attribute (dryrun/layers.py)

    def mine(n: str, t: torch.Tensor) -> torch.Tensor:
        _, dim, parts, idx = f.shards[names[n]]
        return t if dim is None else t.chunk(parts, dim=dim)[idx]

    params = list(model.named_parameters())
    grad_err, grad_at = _worst([(names[n], st.grad(p), mine(n, refs[names[n]].grad)) for n, p in params])
    st.step()
    torch.optim.AdamW(ref.parameters(), lr=LEARNING_RATE).step()
    weights = [(names[n], full_weight(p), mine(n, refs[names[n]].detach())) for n, p in params]
    weight_err, weight_at = _worst(weights)
    return {
        "loss": total,
        "ref_loss": ref_loss,
        "max_rel_grad_err": grad_err,
        "worst_param": grad_at,
        "max_rel_weight_err": weight_err,
        "worst_weight": weight_at,
    }
