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
- ZB-2p: the automatic zero-bubble schedule with an activation budget of 2p micro-batches [Qi et al., ICLR 2024,
  arXiv 2401.10241 §3; the authors' comparison at T_F = T_B = T_W: bubble 0, 2x 1F1B's activation memory].
  The papers give its bubble only at equal pass times (0); for unequal times the model takes the closed form of
  its handcrafted counterpart ZB-H2, (p−1)·(T_F + T_B − 2·T_W) ≥ 0 [ibid. §2.2, Table 2], whose (2p−1)
  micro-batches fit the same budget. Activations: min(2p, m) micro-batches in flight.
- ZB-V: two chunks per rank in a V, each half a 1F1B stage [ibid. §6; Qi et al. 2024, arXiv 2405.15362
  (V-ZB: bubble 0 at T_F = T_B = T_W, activation memory p micro-batches, as 1F1B)]. For unequal times the model
  takes ZB-H2's closed form over chunk-sized passes (half of each T), an approximation no paper states.
  Activations as 1F1B: min(p, m) micro-batches of the rank's layers; two sends per micro-batch (v = 2).
"""

from __future__ import annotations

# The schedule and split rules live in the spine (autopar/layouts.py); re-exported here for the model.
from autopar.layouts import (  # noqa: F401
    SCHEDULE_NAMES,
    SCHEDULES,
    ScheduleRule,
    StageLayout,
    schedule_violations,
    schedules_for,
    split_violations,
    stage_layers,
)
from autopar.perf.arith import Num, where

# Share of a micro-batch's backward spent on weight gradients (W) when B is split as in zero-bubble schedules:
# every linear layer's backward is one dgrad and one wgrad GEMM of equal FLOPs, so T_B ≈ T_W for GEMM-bound
# layers (Qi et al. 2023 §2, "T_F ≈ T_B ≈ T_W" in their profiles). Attention's core has no weights; the
# caller passes the measured split when it has one.
WGRAD_SHARE_OF_BACKWARD = 0.5


def few_microbatch_idle(p: int, m: int, w_share: float = WGRAD_SHARE_OF_BACKWARD) -> float:
    """Idle time (in T_F units, t_b = 2·t_f) of a zero-bubble schedule with no more micro-batches than stages:
    with m ≤ p the warm-up cannot fill the first backward's round trip, and ZB-1p and ZB-2p both take
    (m + p − 1)·(T_F + T_B) + T_W against the ideal m·(T_F + T_B + T_W) [Qi et al., ICLR 2024, arXiv 2401.10241
    Appendix H, Table 12], i.e. ZB-H1's (p−1)·(T_F + T_B − T_W) plus (p − m)·T_W. 0 for m > p."""
    if m > p:
        return 0.0
    tf, t_b, t_w = 1.0, 2.0 * (1 - w_share), 2.0 * w_share
    return (m + p - 1) * (tf + t_b) + t_w - m * (tf + t_b + t_w)


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
        idle = (p - 1) * (tf + (1 - w_share) * tb - w_share * tb)
        return max(idle, few_microbatch_idle(p, m, w_share)) / ((tf + tb) * m)
    if schedule in ("zb-2p", "zb-v"):  # ZB-H2's (p−1)(T_F + T_B − 2·T_W) ≥ 0; ZB-V: half-stage chunks
        tf, tb = 1.0, 2.0
        idle = max(0.0, (p - 1) * (tf + (1 - w_share) * tb - 2 * w_share * tb))
        if schedule == "zb-2p":
            return max(idle, few_microbatch_idle(p, m, w_share)) / ((tf + tb) * m)
        return idle / 2.0 / ((tf + tb) * m)
    if schedule == "dualpipe":  # (p/2−1)(F&B + B − 3W), F&B taken as F + B (no overlap credit)
        tf, tb = 1.0, 2.0
        tw = w_share * tb
        return max(0.0, (p / 2 - 1) * ((tf + tb) + tb - 3 * tw)) / ((tf + tb) * m)
    return (p - 1) / m


def inflight_microbatches(schedule: str, p: int, m: int, v: int = 1, rank: int = 0) -> float:
    """Micro-batches of activations pipeline rank `rank` keeps, in units of its own layers (rank 0, the
    first stage, is the most loaded). Interleaved 1F1B follows Megatron-Core's warm-up count
    (`interleaved_inflight`); the other schedules keep their first-stage rule over the p − rank stages from
    this rank on (1F1B: min(p − rank, m); the last rank one micro-batch)."""
    if schedule == "interleaved" and v > 1 and p > 1:
        return interleaved_inflight(p, m, v, rank)
    p = p - rank
    if p <= 1:
        return 1.0
    if schedule == "dualpipe":
        return float(min(p + 1, m))
    if schedule == "zb-2p":  # the 2p micro-batch activation budget (ZB-2p, module docstring)
        return float(min(2 * p, m))
    return float(min(p, m))  # 1F1B, ZB-H1, ZB-V (and interleaved without virtual stages)


def interleaved_inflight(p: int, m: int, v: int, rank: int) -> float:
    """Micro-batches (in units of the rank's layers) that rank `rank` of an interleaved 1F1B pipeline keeps.

    Megatron-Core (megatron/core/pipeline_parallel/schedules.py `get_pp_rank_microbatches`) runs
    2·(p − rank − 1) + (v − 1)·g warm-up forwards of model chunks (g = microbatch_group_size_per_vp_stage,
    p by default), capped at the m·v chunk-forwards of the step; its steady phase then runs one more forward
    before each backward, so warm-up + 1 chunk activations are live (all m·v when the cap binds). A chunk is
    1/v of the rank's layers. Rank 0 keeps (p·v + p − 1)/v = p·(1 + (p − 1)/(p·v)), Korthikanti et al. 2022
    §4.2.3's figure; the last rank keeps ((v − 1)·p + 1)/v, not the single micro-batch of plain 1F1B."""
    chunks = min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v)
    return chunks / v


# DualPipe overlaps one micro-batch's forward with another's backward so that the expert all-to-all and the
# PP sends run under compute; DeepSeek-V3 reserves 20 of the H800's 132 SMs for that communication
# (arXiv 2412.19437 §3.2.2), so the compute it hides under runs on 112/132 of the SMs.
DUALPIPE_COMM_SMS = 20 / 132


def dualpipe_overlap(comp: Num, comm: Num) -> tuple[Num, Num]:
    """(compute, exposed comm) of one micro-batch when DualPipe's F&B pairing hides `comm` under `comp`.

    While the communication runs, compute has 1 − DUALPIPE_COMM_SMS of the SMs: T = comp + s·comm as long
    as the communication fits inside T; beyond that the compute is slowed throughout and the rest is exposed.
    """
    s = DUALPIPE_COMM_SMS
    slowed = comp / (1.0 - s)
    fits = comm <= slowed
    return where(fits, comp + s * comm, slowed), where(fits, 0.0, comm - slowed)


def parameter_copies(schedule: str) -> int:
    """Copies of its stage's parameters a rank holds (DualPipe keeps the mirrored stage too)."""
    return 2 if schedule == "dualpipe" else 1


def pipeline_time(
    schedule: str, p: int, m: int, v: int, mean_stage: float, per_send: float
) -> tuple[float, float]:
    """(bubble, p2p) seconds of one step, from the mean time of one micro-batch over the stages.

    Idle ranks wait for the others' fill and drain: bubble_fraction × m × the mean stage time. p2p: one
    activation forward and one gradient backward per micro-batch per model chunk, every one on the critical
    path, also where the stack overlaps them: Megatron's overlap_p2p_comm (set for vpp > 1 by NeMo 2 and
    Megatron-Bridge, `_get_model_comm_overlap_cfgs`, and by the NeMo launcher's nemotron_22b.yaml) posts the
    send and lets the sender go on, but 1F1B keeps no slack between stages: the receiving stage's next pass
    needs that very tensor and waits on its receive handle first (megatron/core/pipeline_parallel/
    schedules.py `forward_backward_pipelining_with_interleaving`, `pp_pre_forward`), so each hop's transfer
    delays the chain of dependent passes that sets the step. Measured: with every send charged the published
    interleaved rows are predicted +1.0% (14 public NeMo rows) and +8.6% (53 dev rows) on average; with the
    steady-state sends hidden, +9.4% and +14.1% (public median APE 5.1% -> 7.2%, dev 12.9% -> 15.8%): the
    runs behave as if the sends were not hidden.
    """
    if p <= 1:
        return 0.0, 0.0
    return pipeline_time_of(bubble_fraction(schedule, p, m, v), p, m, v, mean_stage, per_send)


def pipeline_time_of(frac: Num, p: Num, m: Num, v: Num, mean_stage: Num, per_send: Num) -> tuple[Num, Num]:
    """`pipeline_time` given the bubble fraction; floats, or arrays of a block (0 where p = 1)."""
    piped = p > 1
    return where(piped, frac * m * mean_stage, 0.0), where(piped, 2.0 * m * v * per_send, 0.0)
