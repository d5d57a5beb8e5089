"""The slice's model: a decoder stage with tensor-, sequence-, context- and expert-parallel layers.

TP: column-parallel Q/K/V, gate/up and output-layer weights (output dimension split), row-parallel attention
output and down projections (input dimension split) followed by an all-reduce, or by a reduce-scatter over
the sequence with SP (whose column-parallel inputs are then all-gathered). The embedding and the output layer
are split over the vocabulary; the loss is a vocabulary-parallel cross-entropy. CP: each rank holds a
contiguous chunk of the sequence; K and V are all-gathered over the CP group and each chunk's queries attend
causally to all earlier positions. EP: experts are spread over the EP group and tokens are sent to the rank
of each of their top-k experts with all_to_all_single, and back.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from autopar.dryrun.comm import (
    Group,
    Groups,
    copy_to,
    gather_along,
    scatter_sum_along,
    sum_over,
)
from autopar.specs import ModelSpec

INIT_STD = 0.02  # normal init of every weight matrix (GPT-2/Megatron's default init_method_std)


@dataclass
class Factory:
    """Creates the rank's parameters. `consistent`: each is a slice of a full-size tensor drawn from a
    generator keyed by its name (every layout gets the same model: the equivalence check); else drawn
    directly at shard size on the device, keyed by name and shard index (a measured run; a full-size draw
    would be slow and large)."""

    seed: int
    dtype: torch.dtype
    device: torch.device
    consistent: bool
    shards: dict[str, tuple[str, int | None, int, int]] = field(default_factory=dict)

    def make(
        self,
        name: str,
        full: tuple[int, ...],
        dim: int | None = None,
        g: Group | None = None,
        ones: bool = False,
    ) -> nn.Parameter:
        parts, idx = (g.size, g.rank) if g is not None and dim is not None else (1, 0)
        self.shards[name] = (name, dim, parts, idx)
        shape = list(full)
        if dim is not None:
            shape[dim] //= parts
        p = nn.Parameter(self._draw(name, full, tuple(shape), dim, parts, idx, ones))
        p.full_name = name  # type: ignore[attr-defined]  # the dry run's own Parameter attribute
        return p

    def _draw(
        self,
        name: str,
        full: tuple[int, ...],
        shape: tuple[int, ...],
        dim: int | None,
        parts: int,
        idx: int,
        ones: bool,
    ) -> torch.Tensor:
        if ones:
            return torch.ones(shape, dtype=self.dtype, device=self.device)
        key = self.seed * 1_000_003 + zlib.crc32(name.encode())
        if not self.consistent:  # drawn at shard size, keyed by name and shard: replicas hold equal weights
            gen = torch.Generator(device=self.device).manual_seed(key + 7919 * idx)
            return torch.randn(shape, generator=gen, dtype=self.dtype, device=self.device) * INIT_STD
        gen = torch.Generator().manual_seed(key)
        w = torch.randn(full, generator=gen) * INIT_STD
        if dim is not None:
            w = w.chunk(parts, dim=dim)[idx]
        return w.contiguous().to(self.dtype).to(self.device)


@dataclass(frozen=True)
class Ctx:
    """What every layer needs besides its weights."""

    g: Groups
    sp: bool
    recompute: str


def tag(p: nn.Parameter, expert: bool = False, tp_partial: bool = False) -> nn.Parameter:
    """Mark how a parameter's gradient is summed: over dp x cp (dense) or edp (expert), and over TP too when
    the TP ranks saw different tokens (norms under SP, the router)."""
    p.expert, p.tp_partial = expert, tp_partial  # type: ignore[attr-defined]  # the dry run's own Parameter attributes
    return p


def into_tp(x: torch.Tensor, c: Ctx) -> torch.Tensor:
    """Input of a column-parallel linear: the whole sequence chunk (all-gathered under SP)."""
    return gather_along(x, c.g.tp, 1) if c.sp else copy_to(x, c.g.tp)


def out_of_tp(y: torch.Tensor, c: Ctx) -> torch.Tensor:
    """Output of a row-parallel linear: summed over TP (reduce-scattered over the sequence under SP)."""
    return scatter_sum_along(y, c.g.tp, 1) if c.sp else sum_over(y, c.g.tp)


class Norm(nn.Module):
    def __init__(self, f: Factory, name: str, m: ModelSpec, c: Ctx):
        super().__init__()
        self.weight = tag(f.make(name, (m.hidden,), ones=True), tp_partial=c.sp)
        self.layernorm = m.norm == "layernorm"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[-1],)
        if self.layernorm:
            return F.layer_norm(x, shape, self.weight)
        return F.rms_norm(x, shape, self.weight)


class Attention(nn.Module):
    def __init__(self, f: Factory, name: str, m: ModelSpec, c: Ctx):
        super().__init__()
        self.c, tp = c, c.g.tp
        self.hd = m.head_dim or m.hidden // m.heads
        kv = m.kv_heads or m.heads
        self.q = f.make(f"{name}.q", (m.heads * self.hd, m.hidden), 0, tp)
        self.k = f.make(f"{name}.k", (kv * self.hd, m.hidden), 0, tp)
        self.v = f.make(f"{name}.v", (kv * self.hd, m.hidden), 0, tp)
        self.o = f.make(f"{name}.o", (m.hidden, m.heads * self.hd), 1, tp)
        for p in (self.q, self.k, self.v, self.o):
            tag(p)

    def _heads(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return F.linear(x, w).view(b, s, -1, self.hd).transpose(1, 2)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of this CP rank's queries over the all-gathered keys and values."""
        cp = self.c.g.cp
        k, v = gather_along(k, cp, 2), gather_along(v, cp, 2)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if cp.size == 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q.shape[2]
        pos_q = torch.arange(s, device=q.device) + cp.rank * s
        mask = pos_q[:, None] >= torch.arange(k.shape[2], device=q.device)[None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xin = into_tp(x, self.c)
        q, k, v = (self._heads(xin, w) for w in (self.q, self.k, self.v))
        if self.c.recompute == "selective":  # core attention recomputed in backward (Megatron's selective)
            a = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            a = self.core(q, k, v)
        b, _, s, _ = a.shape
        return out_of_tp(F.linear(a.transpose(1, 2).reshape(b, s, -1), self.o), self.c)


class Mlp(nn.Module):
    """SwiGLU or GeLU MLP, TP-parallel (also the shared experts of an MoE layer)."""

    def __init__(self, f: Factory, name: str, m: ModelSpec, c: Ctx, width: int):
        super().__init__()
        self.c, tp = c, c.g.tp
        self.gelu = m.activation == "gelu"
        self.up = tag(f.make(f"{name}.up", (width, m.hidden), 0, tp))
        self.gate = None if self.gelu else tag(f.make(f"{name}.gate", (width, m.hidden), 0, tp))
        self.down = tag(f.make(f"{name}.down", (m.hidden, width), 1, tp))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xin = into_tp(x, self.c)
        return out_of_tp(F.linear(_act(xin, self.gate, self.up), self.down), self.c)


def _act(x: torch.Tensor, gate: torch.Tensor | None, up: torch.Tensor) -> torch.Tensor:
    if gate is None:
        return F.gelu(F.linear(x, up))
    return F.silu(F.linear(x, gate)) * F.linear(x, up)


class Experts(nn.Module):
    """This EP rank's experts (whole: expert TP 1), each a SwiGLU/GeLU MLP."""

    def __init__(self, f: Factory, name: str, m: ModelSpec, ep: Group):
        super().__init__()
        self.local = m.experts // ep.size
        first = ep.rank * self.local
        width = m.moe_ffn_hidden or m.ffn_hidden
        gelu = m.activation == "gelu"

        def mk(i: int, part: str, shape: tuple[int, int]) -> nn.Parameter:
            return tag(f.make(f"{name}.{first + i}.{part}", shape), expert=True)

        self.up = nn.ParameterList([mk(i, "up", (width, m.hidden)) for i in range(self.local)])
        self.gate = (
            None if gelu else nn.ParameterList([mk(i, "gate", (width, m.hidden)) for i in range(self.local)])
        )
        self.down = nn.ParameterList([mk(i, "down", (m.hidden, width)) for i in range(self.local)])

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        outs, start = [], 0
        for i, n in enumerate(counts):
            xi = x[start : start + n]
            gate = self.gate[i] if self.gate is not None else None
            outs.append(F.linear(_act(xi, gate, self.up[i]), self.down[i]))
            start += n
        return torch.cat(outs) if outs else x[:0]
