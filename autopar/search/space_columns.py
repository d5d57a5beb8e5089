"""A layout's strategies as columns, for the vectorized estimator (autopar/perf/vector.py).

Why: building a Strategy per point costs more than estimating it on arrays. `layout_columns` generates a
layout's Cartesian product of knob values directly as numpy arrays, in the index order `Layout.strategy(j)`
unranks (recompute/offload fastest, then ZeRO/HSDP, SP, CP variant, memory saver, split, and the
(micro-batch, vpp, schedule) triple slowest), so row j of the block is `lay.strategy(j)`.
`column_blocks` cuts a whole space into blocks of at most `chunk` rows, one hardware option each, so memory
stays bounded by the chunk.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from autopar.layouts import Split
from autopar.perf.vector_columns import (
    CP_COMM_CODES,
    RECOMPUTE_CODES,
    SCHEDULE_CODES,
    STATES_CODES,
    StrategyColumns,
)  # fmt: skip

# Layout and Space (autopar/search/space.py) are described here by what this module reads of them: space.py
# imports this module lazily (numpy stays out of the CLI's start-up), and a type import back would make a cycle.


class Layout(Protocol):
    """The part of space.Layout the columns read (its degrees and its per-layout knob tuples)."""

    @property
    def hw(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def dp(self) -> int: ...
    @property
    def etp(self) -> int | None: ...
    @property
    def sp(self) -> tuple[bool, ...]: ...
    @property
    def cp_comm(self) -> tuple[str, ...]: ...
    @property
    def split(self) -> tuple[Split, ...]: ...
    @property
    def pipe(self) -> tuple[tuple[int, int, str], ...]: ...
    @property
    def zero_saver(self) -> tuple[tuple[int, int | None, tuple[str | None, float]], ...]: ...
    @property
    def rc_offload(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def size(self) -> int: ...
    @property
    def tables(self) -> KnobTables: ...


class Space(Protocol):
    """The part of space.Space the columns read."""

    @property
    def layouts(self) -> Sequence[Layout]: ...


@dataclass(frozen=True)
class ColumnBlock:
    """Rows [start, start + len(columns)) of a space, all on hardware option `hw`."""

    hw: int
    start: int
    columns: StrategyColumns


@dataclass(frozen=True)
class KnobTables:
    """Each per-layout knob tuple of a Layout as arrays (the values `Layout.strategy` picks from)."""

    pipe: tuple[np.ndarray, np.ndarray, np.ndarray]  # micro_batch, vpp, schedule code
    split: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # first, last (-1 = None), emb, loss
    savers: tuple[np.ndarray, np.ndarray]  # states code (-1 = None), offload; per zero_saver row
    cp_comm: np.ndarray
    sp: np.ndarray
    zero_shard: tuple[np.ndarray, np.ndarray]  # zero, dp_shard (0 = None); per zero_saver row
    rc_offload: tuple[np.ndarray, np.ndarray]  # recompute code, activation_offload_layers


def _arr(values: Sequence[object], dtype: type = np.int64) -> np.ndarray:
    return np.array(values, dtype=dtype)


def knob_tables(lay: Layout) -> KnobTables:
    """The arrays of one layout's knob tuples."""

    def none(x: int | None, s: int) -> int:
        return s if x is None else x

    return KnobTables(
        pipe=(
            _arr([mb for mb, _, _ in lay.pipe]),
            _arr([v for _, v, _ in lay.pipe]),
            _arr([SCHEDULE_CODES.index(x) for _, _, x in lay.pipe]),
        ),
        split=(
            _arr([none(x.first, -1) for x in lay.split]),
            _arr([none(x.last, -1) for x in lay.split]),
            _arr([x.account_embedding for x in lay.split], bool),
            _arr([x.account_loss for x in lay.split], bool),
        ),
        savers=(
            _arr([-1 if x is None else STATES_CODES.index(x) for _, _, (x, _) in lay.zero_saver]),
            _arr([x for _, _, (_, x) in lay.zero_saver], np.float64),
        ),
        cp_comm=_arr([CP_COMM_CODES.index(x) for x in lay.cp_comm]),
        sp=_arr(list(lay.sp), bool),
        zero_shard=(
            _arr([z for z, _, _ in lay.zero_saver]),
            _arr([none(d, 0) for _, d, _ in lay.zero_saver]),
        ),
        rc_offload=(
            _arr([RECOMPUTE_CODES.index(r) for r, _ in lay.rc_offload]),
            _arr([a for _, a in lay.rc_offload]),
        ),
    )


def layout_columns(lay: Layout, tables: KnobTables, start: int, stop: int) -> StrategyColumns:
    """Rows start..stop-1 of a layout (row j = lay.strategy(j)), decoded as Layout.strategy does."""
    j = np.arange(start, stop, dtype=np.int64)
    j, r = np.divmod(j, len(lay.rc_offload))
    j, z = np.divmod(j, len(lay.zero_saver))
    j, s = np.divmod(j, len(lay.sp))
    j, c = np.divmod(j, len(lay.cp_comm))
    j, k = np.divmod(j, len(lay.split))
    n = len(j)

    def full(x: int) -> np.ndarray:
        return np.full(n, x, dtype=np.int64)

    T = tables
    return StrategyColumns(
        tp=full(lay.tp), pp=full(lay.pp), dp=full(lay.dp), cp=full(lay.cp), ep=full(lay.ep),
        etp=full(lay.etp or 0), vpp=T.pipe[1][j], sp=T.sp[s], zero=T.zero_shard[0][z],
        dp_shard=T.zero_shard[1][z], micro_batch=T.pipe[0][j], recompute=T.rc_offload[0][r],
        pp_schedule=T.pipe[2][j], cp_comm=T.cp_comm[c], pp_first_layers=T.split[0][k],
        pp_last_layers=T.split[1][k], pp_account_embedding=T.split[2][k], pp_account_loss=T.split[3][k],
        optimizer_states=T.savers[0][z], optimizer_offload=T.savers[1][z],
        activation_offload_layers=T.rc_offload[1][r],
    )  # fmt: skip


def column_blocks(space: Space, chunk: int) -> Iterator[ColumnBlock]:
    """The whole space in index order as blocks of at most `chunk` rows, one hardware option per block."""
    if chunk <= 0:
        raise ValueError(f"chunk={chunk}: expected a positive row count")
    pieces: list[StrategyColumns] = []
    hw, start, held, pos = -1, 0, 0, 0
    for lay in space.layouts:
        if pieces and lay.hw != hw:
            yield ColumnBlock(hw, start, StrategyColumns.concat(pieces))
            pieces, held = [], 0
        if not pieces:
            hw, start = lay.hw, pos
        tables = lay.tables
        j = 0
        while j < lay.size:
            take = min(lay.size - j, chunk - held)
            pieces.append(layout_columns(lay, tables, j, j + take))
            j, held, pos = j + take, held + take, pos + take
            if held == chunk:
                yield ColumnBlock(hw, start, StrategyColumns.concat(pieces))
                pieces, held, start = [], 0, pos
    if pieces:
        yield ColumnBlock(hw, start, StrategyColumns.concat(pieces))
