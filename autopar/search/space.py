"""The search space: every knob value that can be valid for a model, cluster(s) and workload.

The space is a list of *layouts* (hardware option, tp, pp, cp, ep, etp with dp derived), each with the
micro-batch/virtual-stage/schedule triples, SP settings, ZeRO stages (and HSDP degrees), recompute modes,
CP variants, pipeline splits and memory savers it allows. Every value
comes from the generators of `autopar.layouts`, which filter divisors through the same rules
`validate_strategy` checks (an oracle test enumerates whole spaces to prove they agree). Points are
numbered 0..size-1 (``point(i)`` unranks one), so the space can be counted, enumerated and sampled
uniformly without materialising it. ``decode`` maps Optuna's per-knob categorical choices onto a
point, repairing dependent knobs (etp, vpp, sp, micro-batch) and reporting the rest as rule violations.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from autopar import layouts as lay_rules
from autopar.constraints import Constraint, apply_constraints
from autopar.errors import AutoparError
from autopar.knobs import KNOB_NAMES, ORDERED_KNOBS, RECOMPUTE_BY_FRUGALITY, RECOMPUTE_LEVELS
from autopar.layouts import EVEN_SPLIT, MIN_TOKENS_PER_CP_RANK, ParallelDims, Split, divisors, split_of
from autopar.search.jsontypes import JSONDict, Key
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

if TYPE_CHECKING:
    from autopar.perf.vector_columns import StrategyColumns
    from autopar.search.space_columns import ColumnBlock, KnobTables

__all__ = ["MIN_TOKENS_PER_CP_RANK", "Hardware", "Layout", "Point", "Space", "build_space", "divisors"]

ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
RECOMPUTE: tuple[str, ...] = RECOMPUTE_LEVELS  # a Layout's default (build_layouts: layouts.recompute_values)
MEMO_LIMIT = 200_000  # decode/neighbour memo entries kept before the memo starts afresh (bounds memory)

_T = TypeVar("_T")
# (precision, pp, dp) -> (the (micro_batch, vpp) pairs, the (micro_batch, vpp, schedule) choices): _pipe_memo
_PipeMemo: TypeAlias = dict[
    tuple[str, int, int], tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, str], ...]]
]


def _strategy(**knobs: Any) -> Strategy:
    """A Strategy from knob values the space already validated (they come from `autopar.layouts`).

    Copying a constructed template skips pydantic validation (a search builds tens of thousands of these); the
    result equals, and hashes like, `Strategy(**knobs)` (Strategy has no validators that normalise
    values; tests/search/test_space.py checks equality over whole spaces).
    """
    return _TEMPLATE.model_copy(update=knobs)  # a shallow copy: ~3x cheaper than model_construct


# Every search point sets the same knobs (make_strategy's), so copies of one template share its set of fields.
_TEMPLATE = Strategy.model_construct(**{k: Strategy.model_fields[k].default for k in KNOB_NAMES})


@dataclass(frozen=True)
class Hardware:
    """One hardware option of the search: a cluster and the GEMM precision it trains in."""

    cluster: ClusterSpec
    precision: str
    workload: Workload  # the user's workload with this precision

    @property
    def gpu(self) -> str:
        return self.cluster.gpu.name

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    def label(self) -> str:
        """E.g. '64x H100-SXM bf16'."""
        return f"{self.num_gpus}x {self.gpu} {self.precision}"


Saver = tuple[str | None, float]  # (optimizer_states, optimizer_offload)


def split_code(split: Split) -> str:
    """A pipeline split as one categorical value: 'even', 'emb+loss', 'emb', 'loss' or 'f<first>/l<last>'."""
    if split.first is not None or split.last is not None:
        return f"f{split.first}/l{split.last}"
    names = [n for n, on in (("emb", split.account_embedding), ("loss", split.account_loss)) if on]
    return "+".join(names) or "even"


def make_strategy(
    lay: Layout, mb: int, vpp: int, sched: str, sp: bool, zero: int, ds: int | None, rc: str, cpc: str,
    split: Split, saver: Saver, ao: int = 0,
) -> Strategy:  # fmt: skip
    """The strategy of a layout with its knob values (the one place search points become Strategies)."""
    return _strategy(
        tp=lay.tp,
        pp=lay.pp,
        dp=lay.dp,
        cp=lay.cp,
        ep=lay.ep,
        etp=lay.etp,
        vpp=vpp,
        sp=sp,
        zero=zero,
        micro_batch=mb,
        recompute=rc,
        pp_schedule=sched,
        dp_shard=ds,
        cp_comm=cpc,
        pp_first_layers=split.first,
        pp_last_layers=split.last,
        pp_account_embedding=split.account_embedding,
        pp_account_loss=split.account_loss,
        optimizer_states=saver[0],
        optimizer_offload=saver[1],
        activation_offload_layers=ao,
    )


@dataclass(frozen=True)
class Layout:
    """A (hardware, tp, pp, cp, ep, etp) grid with dp derived, and the knob values it allows."""

    hw: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    etp: int | None  # explicit for MoE models (search points never leave it unset), None for dense
    mb_vpp: tuple[tuple[int, int], ...]  # allowed (micro_batch, vpp) pairs
    sp: tuple[bool, ...]
    zero: tuple[int, ...] = ZERO_STAGES
    recompute: tuple[str, ...] = RECOMPUTE
    schedules: tuple[tuple[int, int, str], ...] = ()  # (mb, vpp, pp_schedule); () = 1F1B/interleaved only
    cp_comm: tuple[str, ...] = ("p2p",)
    dp_shard: tuple[int, ...] = ()  # HSDP shard degrees offered with ZeRO-3 (besides sharding over all dp)
    split: tuple[Split, ...] = (EVEN_SPLIT,)
    savers: tuple[Saver, ...] = ((None, 0.0),)
    act_offload: tuple[int, ...] = ()  # activation-offload layer counts offered (with recompute "none" only)
    framework: str = "megatron"  # the stack, whose ZeRO stages its optimizer savers need (zero_saver)

    @cached_property
    def pipe(self) -> tuple[tuple[int, int, str], ...]:
        """(micro_batch, vpp, pp_schedule) triples."""
        return self.schedules or tuple((mb, v, "interleaved" if v > 1 else "1f1b") for mb, v in self.mb_vpp)

    @cached_property
    def zero_shard(self) -> tuple[tuple[int, int | None], ...]:
        """(zero, dp_shard) pairs: every ZeRO stage without HSDP, plus ZeRO-3 with each HSDP degree."""
        hsdp = tuple((3, ds) for ds in self.dp_shard) if 3 in self.zero else ()
        return tuple((z, None) for z in self.zero) + hsdp

    @cached_property
    def zero_saver(self) -> tuple[tuple[int, int | None, Saver], ...]:
        """(zero, dp_shard, saver) triples: each (zero, dp_shard) pair with each memory saver the stack runs at
        that ZeRO stage (layouts.optimizer_saver_rules: Megatron-Core's need the distributed optimizer)."""
        ok = lay_rules.saver_runs_with
        return tuple((z, d, v) for z, d in self.zero_shard for v in self.savers if ok(self.framework, z, v))

    def savers_at(self, zero: int) -> tuple[Saver, ...]:
        """The memory savers offered with this ZeRO stage."""
        return tuple(v for z, _, v in self.zero_saver if z == zero)

    @cached_property
    def rc_offload(self) -> tuple[tuple[str, int], ...]:
        """(recompute, activation_offload_layers) pairs: every mode without offload, plus "none" with each
        offered count (Megatron offloads only without recompute, layouts.offload_rules)."""
        ao = tuple(("none", n) for n in self.act_offload) if "none" in self.recompute else ()
        return tuple((rc, 0) for rc in self.recompute) + ao

    @property
    def size(self) -> int:
        per_pipe = len(self.sp) * len(self.zero_saver) * len(self.rc_offload) * len(self.cp_comm)
        return len(self.pipe) * per_pipe * len(self.split)

    @cached_property
    def tables(self) -> KnobTables:
        """The knob tuples as numpy arrays (space_columns.KnobTables), for `columns`."""
        from autopar.search.space_columns import knob_tables

        return knob_tables(self)

    def columns(self, start: int = 0, stop: int | None = None) -> StrategyColumns:
        """Strategies start..stop-1 of this layout as a perf.vector_columns.StrategyColumns block, generated as
        arrays (row j - start equals `strategy(j)`), for the vectorized estimator (perf/vector.py)."""
        from autopar.search.space_columns import layout_columns

        return layout_columns(self, self.tables, start, self.size if stop is None else stop)

    def strategy(self, j: int) -> Strategy:
        """The j-th strategy of this layout (0 <= j < size)."""
        j, r = divmod(j, len(self.rc_offload))
        j, z = divmod(j, len(self.zero_saver))
        j, s = divmod(j, len(self.sp))
        j, c = divmod(j, len(self.cp_comm))
        j, k = divmod(j, len(self.split))
        mb, vpp, sched = self.pipe[j]
        zero, ds, saver = self.zero_saver[z]
        rc, ao = self.rc_offload[r]
        return make_strategy(
            self, mb, vpp, sched, self.sp[s], zero, ds, rc, self.cp_comm[c], self.split[k], saver, ao,
        )  # fmt: skip


@dataclass(frozen=True)
class Point:
    """A point of the space: which hardware option and which strategy."""

    hw: int
    strategy: Strategy
    key: Key = field(init=False, compare=False, repr=False)  # identity for the duplicate cache

    def __post_init__(self) -> None:
        s = self.strategy  # computed once: the search looks keys up far more often than it makes points
        key = (
            self.hw, s.tp, s.pp, s.cp, s.ep, s.etp, s.vpp, s.sp, s.zero, s.micro_batch, s.recompute,
            s.pp_schedule, s.cp_comm, s.dp_shard, split_of(s), s.optimizer_states, s.optimizer_offload,
            s.activation_offload_layers or 0,
        )  # fmt: skip
        object.__setattr__(self, "key", key)


def build_layouts(model: ModelSpec, hardware: Sequence[Hardware]) -> list[Layout]:
    """Every valid (hardware, tp, pp, cp, ep, etp) layout with its allowed micro-batch/vpp/SP values."""
    out: list[Layout] = []
    memo: _PipeMemo = {}
    for h, hw in enumerate(hardware):
        n, wl = hw.num_gpus, hw.workload
        for tp in lay_rules.tp_degrees(model, hw.cluster, wl.framework):
            for pp in lay_rules.pp_degrees(model, n // tp, wl.framework):
                for cp in lay_rules.cp_degrees(wl, n // (tp * pp), model):
                    dims = ParallelDims(n, tp, cp, pp, n // (tp * pp * cp))
                    out += _expert_layouts(model, hw, h, dims, memo)
    return out


def _pipe_memo(
    memo: _PipeMemo, model: ModelSpec, wl: Workload, d: ParallelDims
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, str], ...]]:
    """(mb_vpp_pairs, pipe_choices) of a grid, shared by every grid with the same precision, pp and dp.

    Why: both read only the model, the workload (which differs between hardware options by precision
    alone, make_hardware) and the grid's pp and dp (vpp_rules, batch_rules, schedule_rules, stack_rules),
    and they dominate building a procurement space (5 GPU types x 7 counts: ~70k layouts)."""
    key = (wl.precision, d.pp, d.dp)
    hit = memo.get(key)
    if hit is None:
        pipe = lay_rules.pipe_choices(model, wl, d)
        # only the (mb, vpp) pairs with a schedule the stack runs: DeepSpeed's pipeline has no interleaving,
        # so its vpp > 1 pairs have none (a decoded proposal then found no schedule: IndexError)
        hit = memo[key] = (tuple(dict.fromkeys((mb, v) for mb, v, _ in pipe)), pipe)
    return hit


def _expert_layouts(
    model: ModelSpec, hw: Hardware, h: int, dims: ParallelDims, memo: _PipeMemo
) -> list[Layout]:
    """The layouts of one dense grid: one per (ep, etp) pair, when some micro-batch splits the batch."""
    out: list[Layout] = []
    wl, cl = hw.workload, hw.cluster
    common = {
        "zero": lay_rules.zero_values(wl),
        "cp_comm": lay_rules.cp_comm_values(model, cl, wl, dims.tp, dims.cp),
        "split": lay_rules.split_values(model, dims.pp),
        "savers": lay_rules.saver_values(wl),
        "act_offload": lay_rules.act_offload_values(model, wl, dims.pp),
        "recompute": lay_rules.recompute_values(model, wl),
        "framework": wl.framework,
    }
    if not common["cp_comm"]:  # the stack runs no CP variant on this grid (e.g. DeepSpeed: Ulysses alone)
        return out
    for ep, etp in lay_rules.expert_degrees(model, cl, dims, wl.framework):
        d = ParallelDims(dims.world, dims.tp, dims.cp, dims.pp, dims.dp, 1, ep, etp or dims.tp)
        pairs, pipe = _pipe_memo(memo, model, wl, d)
        if pairs:
            sp = lay_rules.sp_values(model, dims.tp, ep, wl.framework)
            if not sp:  # MoE with tp > 1 and ep > 1 wants SP, which the stack does not ship
                continue
            ds = lay_rules.dp_shard_values(cl, wl, d)  # HSDP degrees the expert mesh also splits into
            out.append(
                Layout(
                    h, dims.tp, dims.pp, dims.cp, ep, dims.dp, etp, pairs, sp, schedules=pipe, dp_shard=ds,
                    **common,
                )
            )  # fmt: skip
    return out


@dataclass
class Space:
    """The countable, enumerable, samplable strategy space of one search problem."""

    model: ModelSpec
    hardware: list[Hardware]
    layouts: list[Layout]
    skipped: list[str] = field(default_factory=list)  # hardware options dropped, with the reason
    excluded: str = ""  # the search constraints that filtered the layouts ("--fix tp=8 --forbid cp"), if any
    _cum: list[int] = field(init=False, repr=False)
    _index: dict[tuple[int, int, int, int, int, int | None], Layout] = field(init=False, repr=False)
    _dists: dict[str, list[Any]] | None = field(init=False, repr=False, default=None)
    _decoded: dict[Key, Point | str] = field(init=False, repr=False, default_factory=dict)
    _near: dict[Key, list[Point]] = field(init=False, repr=False, default_factory=dict)
    _keyed: dict[Key, Point] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._cum, total = [], 0
        for lay in self.layouts:
            total += lay.size
            self._cum.append(total)
        self._index = {(lay.hw, lay.tp, lay.pp, lay.cp, lay.ep, lay.etp): lay for lay in self.layouts}

    @property
    def size(self) -> int:
        """Number of knob combinations offered (hardware included)."""
        return self._cum[-1] if self._cum else 0

    def point(self, i: int) -> Point:
        """The i-th point (0 <= i < size): unranks without enumerating."""
        if not 0 <= i < self.size:
            raise IndexError(i)
        k = bisect.bisect_right(self._cum, i)
        lay = self.layouts[k]
        j = i - (self._cum[k - 1] if k else 0)
        return Point(lay.hw, lay.strategy(j))

    def __iter__(self) -> Iterator[Point]:
        """Every point, in index order."""
        for lay in self.layouts:
            for j in range(lay.size):
                yield Point(lay.hw, lay.strategy(j))

    def column_blocks(self, chunk: int = 8192) -> Iterator[ColumnBlock]:
        """Every point in index order as space_columns.ColumnBlock(hw, start, columns) blocks of at most
        `chunk` rows, one hardware option each (memory bounded by the chunk), for perf.vector.estimate_columns."""
        from autopar.search.space_columns import column_blocks

        return column_blocks(self, chunk)

    def sample(self, rng: random.Random) -> Point:
        """A uniformly random point."""
        return self.point(rng.randrange(self.size))

    # --- Optuna encoding: one categorical parameter per knob ------------------------------------
    def distributions(self) -> dict[str, list[Any]]:
        """Categorical choices per knob (union over layouts; knobs with one value are left out)."""
        if self._dists is not None:
            return self._dists
        hw = self.hardware
        d: dict[str, list[Any]] = {
            "gpu": _uniq(h.gpu for h in hw),
            "num_gpus": sorted(_uniq(h.num_gpus for h in hw)),
            "precision": _uniq(h.precision for h in hw),
            "tp": sorted(_uniq(lay.tp for lay in self.layouts)),
            "pp": sorted(_uniq(lay.pp for lay in self.layouts)),
            "vpp": sorted(_uniq(v for lay in self.layouts for _, v in lay.mb_vpp)),
            "cp": sorted(_uniq(lay.cp for lay in self.layouts)),
            "ep": sorted(_uniq(lay.ep for lay in self.layouts)),
            "etp": sorted(_uniq(lay.etp for lay in self.layouts if lay.etp is not None)),
            "sp": sorted(_uniq(s for lay in self.layouts for s in lay.sp)),
            "zero": sorted(_uniq(z for lay in self.layouts for z in lay.zero)),
            "micro_batch": sorted(_uniq(mb for lay in self.layouts for mb, _ in lay.mb_vpp)),
            "recompute": [
                r for r in RECOMPUTE_BY_FRUGALITY if any(r in lay.recompute for lay in self.layouts)
            ],
            "pp_schedule": _uniq(x for lay in self.layouts for _, _, x in lay.pipe),
            "cp_comm": _uniq(x for lay in self.layouts for x in lay.cp_comm),
            "dp_shard": [None, *sorted(_uniq(x for lay in self.layouts for x in lay.dp_shard))],
            "pp_split": _uniq(split_code(x) for lay in self.layouts for x in lay.split),
            "optimizer_states": _uniq(x for lay in self.layouts for x, _ in lay.savers),
            "optimizer_offload": sorted(_uniq(x for lay in self.layouts for _, x in lay.savers)),
            "activation_offload_layers": sorted(_uniq(x for lay in self.layouts for _, x in lay.rc_offload)),
        }
        self._dists = {k: v for k, v in d.items() if len(v) > 1}
        return self._dists

    def hardware_index(self, gpu: str, num_gpus: int, precision: str) -> int | None:
        """Index of the hardware option with these values, or None when it was skipped."""
        for i, h in enumerate(self.hardware):
            if (h.gpu, h.num_gpus, h.precision) == (gpu, num_gpus, precision):
                return i
        return None

    def decode(self, params: JSONDict) -> Point | str:
        """Map per-knob choices onto a point (repairing vpp, sp, micro-batch) or return why it is invalid.

        Memoised on the choices: a search decodes the same choices many times (duplicate proposals,
        the neighbours of front members), and a decoded point is immutable.
        """
        memo = tuple(params.items())
        hit = self._decoded.get(memo)
        if hit is None:
            if len(self._decoded) >= MEMO_LIMIT:
                self._decoded.clear()
            hit = self._decoded[memo] = self._decode(params)
        return hit

    def _decode(self, params: JSONDict) -> Point | str:
        """`decode` without the memo."""
        h0 = self.hardware[0]
        gpu, n, prec = (
            params.get("gpu", h0.gpu),
            params.get("num_gpus", h0.num_gpus),
            params.get("precision", h0.precision),
        )
        h = self.hardware_index(gpu, n, prec)
        lays = self.layouts
        first = lays[0] if lays else None
        tp, pp, cp, ep = (params.get(k, getattr(first, k, 1)) for k in ("tp", "pp", "cp", "ep"))
        if h is None:
            return f"{n}x {gpu} in {prec} is not a usable hardware option"
        lay = self._grid(h, tp, pp, cp, ep, params.get("etp", getattr(first, "etp", None)))
        if isinstance(lay, str):
            return lay
        mb_want = params.get("micro_batch", lay.mb_vpp[0][0])
        mbs = sorted({mb for mb, _ in lay.mb_vpp})
        below = [mb for mb in mbs if mb <= mb_want]
        mb = below[-1] if below else mbs[0]
        v_want = params.get("vpp", 1)
        vs = [v for m, v in lay.mb_vpp if m == mb and v <= v_want]
        vpp = max(vs) if vs else 1
        sp = lay.sp[0] if len(lay.sp) == 1 else bool(params.get("sp", False))
        zeros = tuple(dict.fromkeys(z for z, _, _ in lay.zero_saver))  # the stages some saver runs with
        zero = _nearest_below(zeros, params.get("zero", zeros[0]))
        rc = params.get("recompute", lay.recompute[0])
        rc = rc if rc in lay.recompute else lay.recompute[0]  # a mode the search constraints removed
        return Point(h, make_strategy(lay, mb, vpp, _pick_schedule(lay, mb, vpp, params), sp, zero,
                                      *_pick_rest(lay, zero, rc, params)))  # fmt: skip

    def _grid(self, h: int, tp: int, pp: int, cp: int, ep: int, etp: int | None) -> Layout | str:
        """The layout of a grid, repairing etp to the largest offered value <= the wish; else why not."""
        lay = self._index.get((h, tp, pp, cp, ep, etp))
        if lay is not None:
            return lay
        offered = sorted(x.etp for x in self.layouts if (x.hw, x.tp, x.pp, x.cp, x.ep) == (h, tp, pp, cp, ep))
        if offered and None not in offered:
            below = [e for e in offered if etp is None or e <= etp]
            return self._index[(h, tp, pp, cp, ep, below[-1] if below else offered[0])]
        hw = self.hardware[h]
        why = lay_rules.grid_problems(self.model, hw.cluster, hw.workload, tp, pp, cp, ep, etp)
        if not why and self.excluded:
            return f"excluded by {self.excluded}"
        return lay_rules.explain(why) or f"no micro-batch splits global_batch={hw.workload.global_batch}"

    def point_of_key(self, key: Key) -> Point:
        """Rebuild a point from its cache key (memoised: the local search rebuilds front members)."""
        hit = self._keyed.get(key)
        if hit is None:
            if len(self._keyed) >= MEMO_LIMIT:
                self._keyed.clear()
            hit = self._keyed[key] = self._point_of_key(key)
        return hit

    def _point_of_key(self, key: tuple[Any, ...]) -> Point:  # unpacked: Point.key's fields, in order
        """`point_of_key` without the memo."""
        h, tp, pp, cp, ep, etp, vpp, sp, zero, mb, rc, sched, cpc, ds, split, states, off, ao = key
        dp = self.hardware[h].num_gpus // (tp * pp * cp)
        lay = Layout(h, tp, pp, cp, ep, dp, etp, (), ())
        return Point(h, make_strategy(lay, mb, vpp, sched, sp, zero, ds, rc, cpc, split, (states, off), ao))

    def neighbors(self, point: Point, adjacent: bool = False) -> list[Point]:
        """Points that differ from `point` in one knob (after repair), without duplicates.

        adjacent=True only moves ordered knobs to the next value up or down. Memoised per point (the
        local search asks for the neighbours of the same front members again and again).
        """
        memo = (point.key, adjacent)
        hit = self._near.get(memo)
        if hit is None:
            if len(self._near) >= MEMO_LIMIT:
                self._near.clear()
            hit = self._near[memo] = self._neighbors(point, adjacent)
        return list(hit)

    def _neighbors(self, point: Point, adjacent: bool) -> list[Point]:
        """`neighbors` without the memo."""
        base = self.encode(point)
        out: dict[Key, Point] = {}
        for knob, values in self.distributions().items():
            i = values.index(base[knob])
            cand = values[max(0, i - 1) : i + 2] if adjacent and knob in _ORDERED else values
            for v in cand:
                if v == base[knob]:
                    continue
                q = self.decode({**base, knob: v})
                if isinstance(q, Point) and q.key != point.key:
                    out.setdefault(q.key, q)
        return list(out.values())

    def encode(self, point: Point) -> JSONDict:
        """The per-knob choices that decode to this point (a move's parameters, as Optuna records them)."""
        hw, s = self.hardware[point.hw], point.strategy
        full = {
            "gpu": hw.gpu,
            "num_gpus": hw.num_gpus,
            "precision": hw.precision,
            **{k: getattr(s, k) for k in KNOB_NAMES},  # those without a parameter are dropped below
            "pp_split": split_code(split_of(s)),
            "activation_offload_layers": s.activation_offload_layers or 0,
        }
        return {k: full[k] for k in self.distributions()}


def _pick_schedule(lay: Layout, mb: int, vpp: int, params: JSONDict) -> str:
    """The wished schedule if the layout offers it with (mb, vpp), else the first it offers."""
    offered = [x for m, v, x in lay.pipe if (m, v) == (mb, vpp)]
    want = params.get("pp_schedule")
    return want if want in offered else offered[0]


def _nearest_below(offered: tuple[int, ...], want: int) -> int:
    """The largest offered value <= the wish, else the smallest offered (ordered knobs such as zero)."""
    below = [x for x in offered if x <= want]
    return below[-1] if below else min(offered)


def _pick_rest(
    lay: Layout, zero: int, rc: str, params: JSONDict
) -> tuple[int | None, str, str, Split, Saver, int]:
    """(dp_shard, recompute, cp_comm, split, saver, activation_offload_layers): each wish if the layout offers
    it, else its first value (an offload count with a recompute mode it cannot run with becomes 0)."""
    ds = params.get("dp_shard")
    ds = ds if zero == 3 and ds in lay.dp_shard else None
    cpc = params.get("cp_comm")
    cpc = cpc if cpc in lay.cp_comm else lay.cp_comm[0]
    code = params.get("pp_split")
    split = next((x for x in lay.split if split_code(x) == code), lay.split[0])
    want = (
        params.get("optimizer_states", lay.savers[0][0]),
        params.get("optimizer_offload", lay.savers[0][1]),
    )
    ao = params.get("activation_offload_layers", 0)
    ao = ao if (rc, ao) in lay.rc_offload else 0
    savers = lay.savers_at(zero)
    return ds, rc, cpc, split, want if want in savers else savers[0], ao


_ORDERED = {"num_gpus", *ORDERED_KNOBS}  # the knobs whose values have an order (knobs.KNOBS)


def _uniq(items: Iterable[_T]) -> list[_T]:
    out: list[_T] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def make_hardware(
    clusters: Sequence[ClusterSpec], workload: Workload, precisions: Sequence[str] | None = None
) -> tuple[list[Hardware], list[str]]:
    """Cross clusters with precisions; drop fp8 on GPUs without FP8 peaks (and say so)."""
    precs = list(precisions or [workload.precision])
    bad = [p for p in precs if p not in ("bf16", "fp8")]
    if bad:
        raise AutoparError(f"precision={bad[0]!r}: allowed values are bf16, fp8")
    out, skipped = [], []
    for c in clusters:
        for p in precs:
            if any(lay_rules.precision_rules(c, p)):  # FP8 GEMMs need FP8 tensor cores
                skipped.append(f"{c.gpu.name} has no FP8 tensor cores; fp8 skipped on it")
                continue
            out.append(Hardware(c, p, workload.model_copy(update={"precision": p})))
    return out, skipped


def build_space(
    model: ModelSpec,
    clusters: ClusterSpec | Sequence[ClusterSpec],
    workload: Workload,
    precisions: Sequence[str] | None = None,
    constraints: Sequence[Constraint] = (),
) -> Space:
    """Build the space for a model over one or several clusters and precisions, keeping only the knob values
    `constraints` allow (autopar.constraints: optimize --fix/--forbid)."""
    cl = [clusters] if isinstance(clusters, ClusterSpec) else list(clusters)
    if not cl:
        raise AutoparError("clusters: expected at least one cluster")
    hardware, skipped = make_hardware(cl, workload, precisions)
    if not hardware:
        raise AutoparError("precision: no hardware option left (" + "; ".join(skipped) + ")")
    layouts = apply_constraints(build_layouts(model, hardware), constraints)
    return Space(model, hardware, layouts, skipped, excluded=" ".join(c.text for c in constraints))
