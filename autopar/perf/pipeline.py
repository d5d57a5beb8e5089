"""Pipeline parallelism: stage layouts, schedules, bubbles and in-flight micro-batches.

Each schedule is a row of SCHEDULES with the rule it imposes on (p, v, m) and its source. Bubble fractions
are relative to the ideal step m·(t_f + t_b) of the slowest stage:

- 1F1B (PipeDream-Flush): (p−1)/m [Narayanan et al. 2021, arXiv 2104.04473 §2.2.1].
- interleaved 1F1B with v model chunks per rank: (p−1)/(v·m) [ibid. §2.2.2]; stage 0 keeps
  (1 + (p−1)/(p·v)) × the 1F1B activations [Korthikanti et al. 2022, arXiv 2205.05198 §4.2.3].
- ZB-H1: the backward splits into input-gradient B and weight-gradient W; the W passes fill the cool-down,
  bubble (p−1)·(T_F + T_B − T_W) [Qi et al. 2023, arXiv 2401.10241 §2.1, Fig. 3]; activation memory as
  1F1B (at most p in flight).
- DualPipe: bidirectional, two model chunks per rank (the stage pair i and p−1−i): bubble
  (p/2 − 1)·(F&B + B − 3W), 2× parameters, p+1 micro-batches of activations [DeepSeek-V3 report,
  arXiv 2412.19437 §3.2.1 Table 2]; needs p and m even.
"""

from __future__ import annotations

from dataclasses import dataclass

# Share of a micro-batch's backward spent on weight gradients (W) when B is split as in zero-bubble schedules:
# every linear layer's backward is one dgrad and one wgrad GEMM of equal FLOPs, so T_B ≈ T_W for GEMM-bound
# layers (Qi et al. 2023 §2, "T_F ≈ T_B ≈ T_W" in their profiles). Attention's core has no weights; the
# caller passes the measured split when it has one.
WGRAD_SHARE_OF_BACKWARD = 0.5


@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """One pipeline schedule: which virtual-stage counts it takes and what it needs of p and m."""

    name: str
    vpp: str  # "1" (one chunk per rank), ">1" (interleaved chunks), "any"
    m_multiple_of_p: bool  # Megatron's interleaved schedule historically needs m % p == 0
    p_even: bool
    m_even: bool
    frameworks: tuple[
        str, ...
    ]  # stacks that ship it: the completion picks only these; any is a valid what-if
    source: str


# The valid schedule values and their rules (the search space and the completion read this table).
SCHEDULES: dict[str, ScheduleRule] = {
    "1f1b": ScheduleRule(
        "1f1b",
        "1",
        False,
        False,
        False,
        ("megatron", "megatron-legacy", "torchtitan", "deepspeed"),
        "Narayanan et al. 2021 §2.2.1 (PipeDream-Flush); Megatron-LM default",
    ),
    "interleaved": ScheduleRule(
        "interleaved",
        ">1",
        True,
        False,
        False,
        ("megatron", "megatron-legacy", "torchtitan"),
        "Narayanan et al. 2021 §2.2.2; Megatron --num-layers-per-virtual-pipeline-stage; "
        "torchtitan Interleaved1F1B",
    ),
    "zb-h1": ScheduleRule(
        "zb-h1",
        "1",
        False,
        False,
        False,
        (),  # not in Megatron-LM/torchtitan mainline as a one-chunk schedule (torchtitan ships ZBV/interleaved ZB)
        "Qi et al. 2023 (arXiv 2401.10241) §2.1; sail-sg/zero-bubble-pipeline-parallelism (Megatron-LM fork)",
    ),
    "dualpipe": ScheduleRule(
        "dualpipe",
        "1",
        False,
        True,
        True,
        (),  # DeepSeek's own stack; torchtitan's DualPipeV is the halved (one parameter copy) variant
        "DeepSeek-V3 report (arXiv 2412.19437) §3.2.1; deepseek-ai/DualPipe",
    ),
}
SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)


def schedules_for(framework: str) -> tuple[str, ...]:
    """Schedules a software stack ships (what the search and the completion may choose for it).

    An explicit schedule is always estimated (a what-if), whatever the stack."""
    return tuple(n for n, r in SCHEDULES.items() if framework in r.frameworks) or ("1f1b",)


def schedule_violations(schedule: str, p: int, v: int, m: int, *, strict: bool = True) -> list[str]:
    """Every rule of SCHEDULES[schedule] that (p, v, m) breaks, as sentences ([] = valid)."""
    rule = SCHEDULES.get(schedule)
    if rule is None:
        return [f"pp_schedule={schedule!r} is not one of {', '.join(SCHEDULE_NAMES)}"]
    if p == 1:
        return [] if v == 1 else [f"vpp={v} needs pp > 1"]
    out: list[str] = []
    if rule.vpp == "1" and v != 1:
        out.append(f"pp_schedule={schedule} runs one model chunk per rank (vpp=1), got vpp={v}")
    if rule.vpp == ">1" and v == 1:
        out.append(f"pp_schedule={schedule} needs vpp > 1")
    if rule.m_multiple_of_p and strict and m % p:
        out.append(f"pp_schedule={schedule} needs micro-batches per step ({m}) divisible by pp={p}")
    if rule.p_even and p % 2:
        out.append(f"pp_schedule={schedule} needs an even pp (got {p})")
    if rule.m_even and m % 2:
        out.append(f"pp_schedule={schedule} needs an even number of micro-batches (got {m})")
    return out


def bubble_fraction(
    schedule: str, p: int, m: int, v: int = 1, w_share: float = WGRAD_SHARE_OF_BACKWARD
) -> float:
    """Idle time of the pipeline as a fraction of the ideal m·(t_f+t_b), with t_b = 2·t_f.

    w_share is W's share of the backward (T_W = w_share·t_b). Returns 0 for p = 1.
    """
    if p <= 1:
        return 0.0
    if schedule == "interleaved":
        return (p - 1) / (v * m)
    if schedule == "zb-h1":  # (p−1)(T_F + T_B − T_W) with T_B = (1−w)·t_b, T_W = w·t_b, t_b = 2 t_f
        tf, tb = 1.0, 2.0
        return (p - 1) * (tf + (1 - w_share) * tb - w_share * tb) / ((tf + tb) * m)
    if schedule == "dualpipe":  # (p/2−1)(F&B + B − 3W), F&B taken as F + B (no overlap credit)
        tf, tb = 1.0, 2.0
        tw = w_share * tb
        return max(0.0, (p / 2 - 1) * ((tf + tb) + tb - 3 * tw)) / ((tf + tb) * m)
    return (p - 1) / m


def inflight_microbatches(schedule: str, p: int, m: int, v: int = 1) -> float:
    """Micro-batches of activations the first (most loaded) stage keeps, in units of its own layers."""
    if p <= 1:
        return 1.0
    if schedule == "dualpipe":
        return float(min(p + 1, m))
    base = float(min(p, m))
    if schedule == "interleaved" and v > 1:
        return base * (1 + (p - 1) / (p * v))
    return base


# DualPipe overlaps one micro-batch's forward with another's backward so that the expert all-to-all and the
# PP sends run under compute; DeepSeek-V3 reserves 20 of the H800's 132 SMs for that communication
# (arXiv 2412.19437 §3.2.2), so the compute it hides under runs on 112/132 of the SMs.
DUALPIPE_COMM_SMS = 20 / 132


def dualpipe_overlap(comp: float, comm: float) -> tuple[float, float]:
    """(compute, exposed comm) of one micro-batch when DualPipe's F&B pairing hides `comm` under `comp`.

    While the communication runs, compute has 1 − DUALPIPE_COMM_SMS of the SMs: T = comp + s·comm as long
    as the communication fits inside T; beyond that the compute is slowed throughout and the rest is exposed.
    """
    s = DUALPIPE_COMM_SMS
    if comm <= comp / (1.0 - s):
        return comp + s * comm, 0.0
    slowed = comp / (1.0 - s)
    return slowed, comm - slowed


def parameter_copies(schedule: str) -> int:
    """Copies of its stage's parameters a rank holds (DualPipe keeps the mirrored stage too)."""
    return 2 if schedule == "dualpipe" else 1


@dataclass(frozen=True, slots=True)
class StageLayout:
    """Transformer layers on the first, a middle and the last pipeline stage."""

    first: int
    middle: int
    last: int
    note: str = ""


def stage_layers(
    layers: int,
    p: int,
    *,
    first: int | None = None,
    last: int | None = None,
    account_embedding: bool = False,
    account_loss: bool = False,
) -> StageLayout:
    """Split `layers` over p stages the way Megatron-Core does.

    Explicit `first`/`last` are --decoder-first/last-pipeline-num-layers; the rest split evenly over the
    middle stages. `account_embedding`/`account_loss` (--account-for-embedding/loss-in-pipeline-split)
    count the embedding and the output layer + loss as one layer each, so the first/last stage get one
    transformer layer fewer. Without options the remainder of an uneven split goes on the last stage.
    """
    if p <= 1:
        return StageLayout(layers, layers, layers)
    if first is not None or last is not None:
        f = first if first is not None else None
        la = last if last is not None else None
        n_mid = p - (f is not None) - (la is not None)
        rest = layers - (f or 0) - (la or 0)
        mid = -(-rest // n_mid) if n_mid > 0 else 0
        return StageLayout(
            f if f is not None else mid, mid, la if la is not None else mid, "explicit first/last"
        )
    units = layers + int(account_embedding) + int(account_loss)
    per = -(-units // p)
    la = units - (p - 1) * per - int(account_loss)
    if la <= 0:
        per = units // p
        la = units - (p - 1) * per - int(account_loss)
    if account_embedding or account_loss:
        return StageLayout(
            max(0, per - int(account_embedding)), per, max(0, la), "embedding/loss counted as layers"
        )
    note = f"uneven pipeline split: {per} layers on the first stages, {la} on the last" if layers % p else ""
    return StageLayout(per, per, la, note)


def split_violations(
    layers: int, p: int, lay: StageLayout, account_embedding: bool, account_loss: bool
) -> list[str]:
    """Megatron's checks of an uneven split: every stage gets layers and the stages add up to the model."""
    if p <= 1:
        return []
    total = lay.first + (p - 2) * lay.middle + lay.last
    out = []
    if min(lay.first, lay.last) < 0 or (p > 2 and lay.middle <= 0):
        out.append(f"pipeline split leaves a stage without layers ({lay.first}/{lay.middle}/{lay.last})")
    if total != layers:
        out.append(
            f"pipeline split {lay.first} + {p - 2}x{lay.middle} + {lay.last} = {total} layers, not {layers}"
            + (
                " (embedding/loss counted as layers must make layers + 1 or + 2 divisible by pp)"
                if account_embedding or account_loss
                else ""
            )
        )
    return out


def pipeline_time(
    schedule: str, p: int, m: int, v: int, mean_stage: float, per_send: float
) -> tuple[float, float]:
    """(bubble, p2p) seconds of one step, from the mean time of one micro-batch over the stages.

    Idle ranks wait for the others' fill and drain: bubble_fraction × m × the mean stage time. p2p: one
    activation forward and one gradient backward per micro-batch per model chunk.
    """
    if p <= 1:
        return 0.0, 0.0
    return bubble_fraction(schedule, p, m, v) * m * mean_stage, 2.0 * m * v * per_send
