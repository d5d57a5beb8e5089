"""Ulysses (a2a) context parallelism as Transformer Engine runs it: hand-derived costs (perf/cp.py `_a2a`)."""

from __future__ import annotations

import dataclasses

import pytest

from autopar.perf import cp
from autopar.perf.comm import Links

LINKS = Links(node_size=8, scaleup_bw=100e9, scaleout_bw=10e9, scaleup_lat=0.0, scaleout_lat=0.0)
X = cp.CpInputs(
    c=4,
    t=2,
    tokens=2048.0,
    seq_len=8192,
    kv_bytes_tok=4096.0,
    q_bytes_tok=16384.0,
    out_elems_tok=4096.0,
    attn_fwd=1e-3,
    attn_bwd=2e-3,
    mla=False,
    full_recompute=False,
    kernel_overhead_s=2e-6,
    hbm_bw=2e12,
)


def test_a2a_re_layout_copies_by_hand() -> None:
    """Bytes one rank exchanges per pass: 2048 tokens x (2 x 16384 + 4096) B / tp 2 = 37.748736 MB.

    TE copies each exchanged tensor 3 times (read + write): 2 passes x 3 x 2 x 37.748736 MB at 2 TB/s
    = 226.492416 us, plus 2 passes x 4 tensors x 3 copy kernels x 2 us = 48 us of launches."""
    got = cp.cp_cost("a2a", X, LINKS)
    assert got.compute == pytest.approx(226.492416e-6 + 48e-6, rel=1e-9)
    # The exchange itself is unchanged (bytes over the NVLink all-to-all), and full recompute adds a pass.
    full = cp.cp_cost("a2a", dataclasses.replace(X, full_recompute=True), LINKS)
    assert full.compute == pytest.approx(1.5 * got.compute, rel=1e-9)
    assert full.comm == pytest.approx(1.5 * got.comm, rel=1e-9)


def test_a2a_copies_shrink_with_tp_and_vanish_without_cp() -> None:
    t4 = cp.cp_cost("a2a", dataclasses.replace(X, t=4, kernel_overhead_s=0.0), LINKS)
    t2 = cp.cp_cost("a2a", dataclasses.replace(X, kernel_overhead_s=0.0), LINKS)
    assert t4.compute == pytest.approx(t2.compute / 2, rel=1e-9)
    assert cp.cp_cost("a2a", dataclasses.replace(X, c=1), LINKS) == cp.CpCost(0.0, 0.0)
