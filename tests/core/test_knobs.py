"""The knob registry (autopar/knobs.py): one declaration per knob, the label written and read from it."""

from __future__ import annotations

from typing import get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from autopar import knobs
from autopar.launch.labels import parse_strategy_label
from autopar.specs import Strategy, Workload


def test_every_strategy_field_is_one_knob():
    assert sorted(knobs.KNOB_NAMES) == sorted(Strategy.model_fields)
    assert len(set(knobs.KNOB_NAMES)) == len(knobs.KNOB_NAMES)


def test_domains_are_the_specs_types():
    assert get_args(Workload.model_fields["framework"].annotation) == knobs.FRAMEWORKS
    sched = Strategy.model_fields["pp_schedule"].annotation
    assert get_args(get_args(sched)[0]) == knobs.SCHEDULE_NAMES
    # the completion order Estimate.assumed lists (tests/data/pinned_estimates.json was recorded with it)
    assert knobs.COMPLETABLE_KNOBS == (
        "vpp", "micro_batch", "recompute", "etp", "pp_schedule", "zero", "activation_offload_layers",
    )  # fmt: skip


def test_stacks_ship_what_the_schedule_rows_say():
    from autopar.layouts import STACKS

    for fw, stack in STACKS.items():
        assert stack.schedules == {n: r.stacks[fw] for n, r in knobs.SCHEDULES.items() if fw in r.stacks}
    assert set(knobs.FRAMEWORKS) == set(STACKS)


def test_unset_micro_batch_shows_no_token():
    """It showed 'mbNone', which no parser read; without the token a label reads back as Strategy's default."""
    assert Strategy(tp=2, micro_batch=None).label() == "TP2 Z1"
    assert parse_strategy_label("TP2 Z1").micro_batch == 1
    assert "None" not in Strategy(pp=2, vpp=None, pp_schedule=None, recompute=None, micro_batch=None).label()


def test_known_labels():
    s = Strategy(
        tp=4, sp=True, pp=2, vpp=2, pp_schedule="interleaved", cp=2, ep=8, etp=1, dp=8, recompute="selective"
    )
    assert s.label() == "TP4+SP PP2v2 CP2 EP8 ETP1 DP8/Z1 mb1 sel-AC"
    assert Strategy(pp=16, pp_schedule="dualpipe", zero=0, optimizer_offload=0.5).label() == (
        "TP1 PP16-dualpipe mb1 offload0.5"
    )


def _canonical(draw: st.DrawFn) -> Strategy:
    """A strategy whose label says everything about it: SP only with TP, ETP unset or unlike TP, a shown
    schedule only with PP, virtual stages only where the schedule runs them, knobs set."""
    tp, pp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4, 16]))
    sched = draw(st.sampled_from(knobs.SCHEDULE_NAMES)) if pp > 1 else "1f1b"
    rule = knobs.SCHEDULES[sched]
    vpp = 1 if rule.takes_vpp(1) else draw(st.sampled_from([v for v in (2, 3, 4) if rule.takes_vpp(v)]))
    etp = draw(st.sampled_from([None, *(e for e in (1, 2, 8) if e != tp)]))
    cp = draw(st.sampled_from([1, 2, 4]))
    return Strategy(
        tp=tp,
        sp=tp > 1 and draw(st.booleans()),
        pp=pp,
        vpp=vpp,
        pp_schedule=sched,
        pp_first_layers=draw(st.sampled_from([None, 0, 3])) if pp > 1 else None,
        pp_last_layers=draw(st.sampled_from([None, 2])) if pp > 1 else None,
        pp_account_embedding=pp > 1 and draw(st.booleans()),
        pp_account_loss=pp > 1 and draw(st.booleans()),
        cp=cp,
        cp_comm=draw(st.sampled_from(knobs.CP_COMM_NAMES)) if cp > 1 else "p2p",
        ep=draw(st.sampled_from([1, 8])),
        etp=etp,
        dp=draw(st.sampled_from([0, 1, 8, 64])),
        zero=draw(st.integers(0, 3)),
        dp_shard=draw(st.sampled_from([None, 2, 8])),
        micro_batch=draw(st.integers(1, 64)),
        recompute=draw(st.sampled_from(knobs.RECOMPUTE_MODES)),
        optimizer_states=draw(st.sampled_from([None, *knobs.OPTIMIZER_STATES])),
        optimizer_offload=draw(st.sampled_from([0.0, 1.0, 0.5, 0.25, 0.125, 1e-05])),
        activation_offload_layers=draw(st.integers(0, 40)),
    )


@settings(max_examples=400, deadline=None)
@given(st.composite(_canonical)())
def test_label_round_trips(s: Strategy):
    assert parse_strategy_label(s.label()) == s


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        Strategy,
        tp=st.integers(1, 8),
        sp=st.booleans(),
        pp=st.integers(1, 8),
        vpp=st.one_of(st.none(), st.integers(1, 4)),
        pp_schedule=st.one_of(st.none(), st.sampled_from(knobs.SCHEDULE_NAMES)),
        etp=st.one_of(st.none(), st.integers(1, 8)),
        zero=st.one_of(st.none(), st.integers(0, 3)),
        micro_batch=st.integers(1, 8),
        recompute=st.one_of(st.none(), st.sampled_from(knobs.RECOMPUTE_MODES)),
    )
)
def test_any_label_reads_back_to_the_same_label(s: Strategy):
    """Whatever a label leaves out (a no-op SP, an unset knob but the micro-batch, whose default shows),
    reading it back writes the same label."""
    assert parse_strategy_label(s.label()).label() == s.label()
