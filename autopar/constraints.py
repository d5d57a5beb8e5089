"""Search constraints (`optimize --fix KNOB=VALUE --forbid KNOB[=VALUE]`): a filter on the layouts of a space.

`--fix tp=8` keeps only that value of a knob; `--forbid cp` pins an axis to 1 or turns a feature off (the
knob's OFF value: `--forbid X` = `--fix X=OFF`); `--forbid cp_comm=allgather` drops one value. The filter runs
once, on the layouts `build_space` built (each layout keeps the knob values that pass), so every sampler, the
exhaustive sweep and the local search see the smaller space without knowing about it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autopar.errors import SpecError
from autopar.layouts import EVEN_SPLIT, Axis

Layout = Any  # autopar.search.space.Layout (which imports this module)

_NO_OFF = object()  # a knob that --forbid without a value cannot pin (it needs --forbid KNOB=VALUE)


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("on", "true", "1", "yes"):
        return True
    if low in ("off", "false", "0", "no"):
        return False
    raise ValueError(text)


def _none_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda t: None if t.lower() in ("none", "default") else parse(t)


@dataclass(frozen=True)
class Knob:
    """A knob the constraints can name: the values a layout offers and how to keep only some of them."""

    name: str
    values: Callable[[Layout], Iterable[Any]]
    restrict: Callable[[Layout, Callable[[Any], bool]], Layout | None]  # None: the layout has no value left
    parse: Callable[[str], Any] = int
    off: Any = _NO_OFF  # the value `--forbid KNOB` keeps (1 for an axis, the feature off)
    fixable: bool = True  # False: a layout always keeps OFF too, so only --forbid is exact


def _axis(name: str) -> Knob:
    return Knob(
        name,
        lambda lay: (getattr(lay, name),),
        lambda lay, ok: lay if ok(getattr(lay, name)) else None,
        off=1,
    )


def _keep(lay: Layout, **fields: tuple[Any, ...]) -> Layout | None:
    """The layout restricted to these values; None when a knob, or every (zero, saver) pair, is left empty."""
    new = replace(lay, **fields) if all(fields.values()) else None
    return new if new is not None and new.zero_saver else None


def _tuple(name: str, field: str, key: Callable[[Any], Any] = lambda x: x, **kw: Any) -> Knob:
    return Knob(
        name,
        lambda lay: (key(x) for x in getattr(lay, field)),
        lambda lay, ok: _keep(lay, **{field: tuple(x for x in getattr(lay, field) if ok(key(x)))}),
        **kw,
    )


def _optional(name: str, field: str, **kw: Any) -> Knob:
    """A feature offered besides its off value (HSDP degrees, activation-offload counts): only --forbid."""
    return Knob(
        name,
        lambda lay: getattr(lay, field),
        lambda lay, ok: replace(lay, **{field: tuple(x for x in getattr(lay, field) if ok(x))}),
        fixable=False,
        **kw,
    )


def _pipe(name: str, i: int, **kw: Any) -> Knob:
    """micro_batch (0), vpp (1) or pp_schedule (2) of the layout's (mb, vpp, schedule) triples."""

    def restrict(lay: Layout, ok: Callable[[Any], bool]) -> Layout | None:
        pipe = tuple(t for t in lay.pipe if ok(t[i]))
        return _keep(lay, schedules=pipe, mb_vpp=tuple(dict.fromkeys((mb, v) for mb, v, _ in pipe)))

    return Knob(name, lambda lay: (t[i] for t in lay.pipe), restrict, **kw)


def _no_value(text: str) -> Any:
    raise ValueError(text)


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        *(_axis(a) for a in (Axis.TP, Axis.PP, Axis.CP, Axis.EP, Axis.DP)),
        Knob(Axis.ETP, lambda lay: (lay.etp,), lambda lay, ok: lay if ok(lay.etp) else None, off=1),
        _pipe("micro_batch", 0),
        _pipe(Axis.VPP, 1, off=1),
        _pipe("pp_schedule", 2, parse=str),
        _tuple("sp", "sp", parse=_bool, off=False),
        _tuple("zero", "zero"),
        _tuple("recompute", "recompute", parse=str),
        _tuple("cp_comm", "cp_comm", parse=str),
        _tuple("split", "split", parse=_no_value, off=EVEN_SPLIT, fixable=False),  # --forbid split: even only
        _tuple("states", "savers", lambda s: s[0], parse=_none_or(str), off=None),
        _tuple("offload", "savers", lambda s: s[1], parse=float, off=0.0),
        _optional("hsdp", "dp_shard", off=None),
        _optional("act_offload", "act_offload", off=0),
    )
}
ALIASES = {"mb": "micro_batch", "schedule": "pp_schedule", "ao": "act_offload", "dp_shard": "hsdp"}


@dataclass(frozen=True)
class Constraint:
    """One --fix (keep only `value`) or --forbid (drop `value`) of a knob."""

    knob: str
    value: Any
    keep: bool
    text: str  # as the user wrote it, e.g. "--forbid cp"

    def ok(self, v: Any) -> bool:
        return (v == self.value) == self.keep


def _knob(name: str, text: str) -> Knob:
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key in KNOBS:
        return KNOBS[key]
    close = difflib.get_close_matches(key, [*KNOBS, *ALIASES], n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise SpecError(f"{text}: unknown knob {name!r}{hint} (knobs: {', '.join(KNOBS)})")


def parse_constraint(text: str, keep: bool) -> Constraint:
    """`KNOB=VALUE` (--fix or --forbid) or a bare `KNOB` (--forbid only) as a Constraint."""
    flag = f"--{'fix' if keep else 'forbid'} {text}"
    name, eq, raw = text.partition("=")
    knob = _knob(name, flag)
    if not eq:
        if keep or knob.off is _NO_OFF:
            raise SpecError(f"{flag}: give a value, e.g. {knob.name}={'...' if keep else 'VALUE'}")
        return Constraint(knob.name, knob.off, True, flag)
    if keep and not knob.fixable:
        raise SpecError(
            f"{flag}: {knob.name} can only be forbidden (--forbid {knob.name} or {knob.name}=VALUE)"
        )
    try:
        value = knob.parse(raw.strip())
    except ValueError:
        raise SpecError(f"{flag}: {raw!r} is not a valid {knob.name} value") from None
    return Constraint(knob.name, value, keep, flag)


def parse_constraints(fix: Sequence[str] = (), forbid: Sequence[str] = ()) -> tuple[Constraint, ...]:
    """The constraints of `--fix` and `--forbid` options (one-line errors for unknown knobs or values)."""
    return tuple(parse_constraint(t, True) for t in fix) + tuple(parse_constraint(t, False) for t in forbid)


def _order(v: Any) -> tuple[Any, ...]:
    return (v is None, v if isinstance(v, int | float) else 0, str(v))


def _check_value(c: Constraint, layouts: Sequence[Layout]) -> None:
    """A fixed or forbidden value the space does not offer cannot take effect: say which values it offers
    (`--forbid X`, X off, is always meaningful: the layouts without X stay)."""
    offered = sorted({v for lay in layouts for v in KNOBS[c.knob].values(lay)}, key=_order)
    if (c.keep and c.value == KNOBS[c.knob].off) or c.value in offered:
        return
    shown = ", ".join(str(v) for v in offered) or "none"
    close = difflib.get_close_matches(str(c.value), [str(v) for v in offered], n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close and isinstance(c.value, str) else ""
    raise SpecError(f"{c.text}: {c.knob}={c.value!r} is not in the search space{hint} (offered: {shown})")


def apply_constraints(layouts: Sequence[Layout], constraints: Sequence[Constraint]) -> list[Layout]:
    """The layouts with only the knob values the constraints allow (layouts left with none are dropped)."""
    out = list(layouts)
    for c in constraints:
        _check_value(c, layouts)
        restrict = KNOBS[c.knob].restrict
        out = [x for x in (restrict(lay, c.ok) for lay in out) if x is not None and x.size]
    if constraints and not out:
        given = " ".join(c.text for c in constraints)
        raise SpecError(f"{given}: no parallel layout of the search space is left; relax one of them")
    return out
