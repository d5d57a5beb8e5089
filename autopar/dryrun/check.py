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
from autopar.dryrun.train import SEED, batch, stepper

ALONE = Group(None, 1, 0)


def _reference(plan: SlicePlan, device: torch.device) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients (by parameter name) of the unsharded model on the whole step's tokens."""
    alone = Groups(*(ALONE,) * 6)
    f = Factory(SEED, torch.float32, device, True)
    model = SliceModel(f, plan.model, Ctx(alone, False, plan.degrees.recompute))
    gen = torch.Generator().manual_seed(SEED)  # the same draw as train.batch for step 0, micro 0
    shape = (plan.degrees.dp * plan.micro_batch, plan.seq_len)
    ids, targets = (torch.randint(plan.model.vocab, shape, generator=gen).to(device) for _ in range(2))
    loss = model(ids, targets, plan.tokens_per_step)
    loss.backward()
    return float(loss.detach()), {p.full_name: p.grad for p in model.parameters()}  # type: ignore[attr-defined]


def check_layers(plan: SlicePlan, g: Groups, device: torch.device) -> dict[str, Any]:
    """This rank's loss and worst relative gradient error against the reference."""
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 on GPUs too
    torch.backends.cudnn.allow_tf32 = False
    f = Factory(SEED, torch.float32, device, True)
    model = SliceModel(f, plan.model, Ctx(g, plan.degrees.sp, plan.degrees.recompute))
    names = {n: p.full_name for n, p in model.named_parameters()}  # type: ignore[attr-defined]
    st = stepper(model, g, plan.degrees.zero, torch.float32)
    st.zero_grad()
    ids, targets = batch(plan, g, 0, 0, device)
    loss = model(ids, targets, plan.tokens_per_step)
    loss.backward()
    st.sync()
    total = float(all_reduce_(loss.detach().clone(), g.dpcp))
    ref_loss, ref_grads = _reference(plan, device)
    worst, where = 0.0, ""
    for n, p in model.named_parameters():
        _, dim, parts, idx = f.shards[names[n]]
        ref = ref_grads[names[n]]
        ref = ref if dim is None else ref.chunk(parts, dim=dim)[idx]
        err = float((st.grad(p) - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        if err > worst:
            worst, where = err, names[n]
    return {"loss": total, "ref_loss": ref_loss, "max_rel_grad_err": worst, "worst_param": where}
