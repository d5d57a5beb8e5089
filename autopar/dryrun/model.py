"""The slice as a module: vocabulary-parallel embedding, decoder blocks (dense or MoE), output layer and
a vocabulary-parallel cross-entropy (the loss of the rank's tokens, summed, over the step's token count)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from autopar.dryrun.comm import (
    Group,
    all_reduce_,
    all_to_all,
    chunk_dim,
    copy_to,
    gather_replicated,
    sum_over,
)
from autopar.dryrun.layers import Attention, Ctx, Experts, Factory, Mlp, Norm, into_tp, out_of_tp, tag
from autopar.specs import ModelSpec


class Moe(nn.Module):
    """Router (softmax, top-k), routed experts spread over the EP group, shared experts TP-parallel."""

    def __init__(self, f: Factory, name: str, m: ModelSpec, c: Ctx):
        super().__init__()
        self.c, self.k, self.n_experts, self.norm_topk = c, m.topk, m.experts, m.router_norm_topk
        self.router = tag(f.make(f"{name}.router", (m.experts, m.hidden)), tp_partial=c.g.tp.size > 1)
        self.experts = Experts(f, f"{name}.experts", m, c.g.ep)
        width = m.shared_experts * m.shared_ffn
        self.shared = Mlp(f, f"{name}.shared", m, c, width) if width else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        tp = self.c.g.tp
        tokens = x.reshape(-1, h)
        if not self.c.sp:  # tokens replicated over TP: each TP rank routes its own share of them
            tokens = chunk_dim(copy_to(tokens, tp), tp, 0)
        y = self._routed(tokens)
        if not self.c.sp:
            y = gather_replicated(y, tp, 0)
        y = y.view(b, s, h)
        return y + self.shared(x) if self.shared is not None else y

    def _routed(self, tokens: torch.Tensor) -> torch.Tensor:
        probs = F.linear(tokens, self.router).float().softmax(-1)
        w, idx = probs.topk(self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        flat = idx.flatten()
        order = flat.argsort(stable=True)  # (token, choice) pairs grouped by expert
        back = self._exchange(tokens[order // self.k], torch.bincount(flat, minlength=self.n_experts))
        ys = back[order.argsort()].view(tokens.shape[0], self.k, -1)
        return (ys * w.unsqueeze(-1).to(ys.dtype)).sum(1)

    def _exchange(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Send expert-sorted rows to their experts' EP ranks, run the local experts, send the results back."""
        ep = self.c.g.ep
        local = self.n_experts // ep.size
        per = counts.view(ep.size, local)  # rows this rank sends to each rank's experts
        got_counts = torch.empty_like(per)  # rows each rank sends to this rank's experts
        if ep.size > 1:
            dist.all_to_all_single(got_counts, per.contiguous(), group=ep.pg)
        else:
            got_counts = per
        send, recv = per.sum(1).tolist(), got_counts.sum(1).tolist()
        got = all_to_all(xs, ep, send, recv)
        expert_of = torch.arange(local, device=xs.device).repeat(ep.size)
        perm = expert_of.repeat_interleave(got_counts.flatten()).argsort(stable=True)
        out = self.experts(got[perm], got_counts.sum(0).tolist())[perm.argsort()]
        return all_to_all(out, ep, recv, send)


class Block(nn.Module):
    def __init__(self, f: Factory, i: int, m: ModelSpec, c: Ctx, moe: bool):
        super().__init__()
        self.c = c
        self.n1, self.n2 = Norm(f, f"l{i}.n1", m, c), Norm(f, f"l{i}.n2", m, c)
        self.attn = Attention(f, f"l{i}.attn", m, c)
        self.mlp = Moe(f, f"l{i}.moe", m, c) if moe else Mlp(f, f"l{i}.mlp", m, c, m.ffn_hidden)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.c.recompute == "full":  # the whole layer re-run in backward from its input
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


def vocab_parallel_ce(logits: torch.Tensor, targets: torch.Tensor, tp: Group) -> torch.Tensor:
    """Cross-entropy per token of logits split over the vocabulary (this rank holds one contiguous range)."""
    per = logits.shape[-1]
    m = all_reduce_(logits.detach().amax(-1, keepdim=True), tp, dist.ReduceOp.MAX)
    z = logits - m
    sumexp = sum_over(z.exp().sum(-1), tp)
    local = targets - tp.rank * per
    inside = (local >= 0) & (local < per)
    picked = z.gather(-1, local.clamp(0, per - 1).unsqueeze(-1)).squeeze(-1) * inside
    return sumexp.log() - sum_over(picked, tp)


class SliceModel(nn.Module):
    def __init__(self, f: Factory, m: ModelSpec, c: Ctx):
        super().__init__()
        self.c = c
        tp = c.g.tp
        self.emb = tag(f.make("emb", (m.vocab, m.hidden), 0, tp))
        moe = [m.is_moe and i >= m.dense_layers for i in range(m.layers)]
        self.blocks = nn.ModuleList(Block(f, i, m, c, moe[i]) for i in range(m.layers))
        self.norm = Norm(f, "final_norm", m, c)
        self.head = self.emb if m.tied_embeddings else tag(f.make("head", (m.vocab, m.hidden), 0, tp))

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        per = self.emb.shape[0]
        local = ids - self.c.g.tp.rank * per
        inside = ((local >= 0) & (local < per)).unsqueeze(-1)
        x = F.embedding(local.clamp(0, per - 1), self.emb) * inside.to(self.emb.dtype)
        return out_of_tp(x, self.c)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor, denom: int) -> torch.Tensor:
        """Summed loss of this rank's tokens over `denom` (the step's tokens): gradients summed over the
        data-parallel ranks then give the gradient of the step's mean loss."""
        x = self._embed(ids)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(into_tp(self.norm(x), self.c), self.head).float()
        return vocab_parallel_ce(logits, targets, self.c.g.tp).sum() / denom
