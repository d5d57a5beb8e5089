"""`estimate()` outputs pinned for a corpus of ~60 strategies: a refactor of the model must not move them.

The corpus (dense/GQA, MLA and GQA MoE, FP8 recipes, CP variants, TP overlap, every recompute mode,
pre-FlashAttention Megatron, torchtitan/FSDP/DeepSpeed stacks, LoRA, uneven stages, ZB-H1/DualPipe, unset knobs)
and the script that writes the JSON are in tests/data/pinned_estimates.py. When a change to the predictions
IS intended, regenerate with `.venv/bin/python tests/data/pinned_estimates.py` and commit the JSON with it.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parents[1] / "data"
REL = 1e-12


def _generator():
    spec = importlib.util.spec_from_file_location("pinned_estimates", DATA / "pinned_estimates.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()
ROWS: list[dict[str, Any]] = json.loads((DATA / "pinned_estimates.json").read_text(encoding="utf-8"))
REGEN = "regenerate tests/data/pinned_estimates.json only if the model change is intended"


def _diffs(path: str, want: Any, got: Any) -> list[str]:
    """Every leaf where `got` differs from `want` (floats at rel 1e-12, everything else exactly)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want.keys() - got.keys()]
        out += [f"{path}.{k}: new field" for k in got.keys() - want.keys()]
        for k in want.keys() & got.keys():
            out += _diffs(f"{path}.{k}", want[k], got[k])
        return out
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if math.isclose(got, want, rel_tol=REL, abs_tol=0.0):
            return []
        return [f"{path}: {want!r} -> {got!r}"]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


def test_corpus_is_large_and_json_matches_the_script():
    # The JSON's inputs are the script's corpus (editing one without regenerating the other fails here).
    assert len(ROWS) >= 60
    assert [{k: v for k, v in r.items() if k != "expected"} for r in ROWS] == GEN.cases()


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_estimate_is_pinned(row: dict[str, Any]):
    got = json.loads(json.dumps(GEN._finite(GEN.run_case(row))))
    diffs = _diffs(row["name"], row["expected"], got)
    assert not diffs, f"{len(diffs)} outputs moved ({REGEN}):\n" + "\n".join(sorted(diffs)[:40])


def test_comparison_catches_a_one_ulp_scale_change():
    # The guard itself: a relative change of 1e-9 in one breakdown term is reported, 1e-14 is not.
    want = ROWS[0]["expected"]
    moved = json.loads(json.dumps(want))
    moved["time"]["compute"] *= 1 + 1e-9
    assert _diffs("x", want, moved) == [
        f"x.time.compute: {want['time']['compute']!r} -> {moved['time']['compute']!r}"
    ]
    moved["time"]["compute"] = want["time"]["compute"] * (1 + 1e-14)
    assert _diffs("x", want, moved) == []


def test_adam_8bit_workload_estimates_with_six_byte_states():
    # Workload(optimizer="adam_8bit") used to raise KeyError (a dead per-optimizer table in PerfContext).
    # By hand: block-wise 8-bit Adam keeps fp32 master 4 B + m, v 1 B each = 6 B/param (Dettmers et al. 2022,
    # arXiv 2110.02861 §2) against 12 B for fp32 Adam, so the optimizer memory is exactly half.
    by_name = {r["name"]: r for r in ROWS}
    adam8 = GEN.run_case(by_name["l8b-8bit"])["memory"]["optimizer"]
    bf16 = GEN.run_case(by_name["l8b-bf16states"])["memory"]["optimizer"]  # same run, 8 B/param states
    assert adam8 == pytest.approx(bf16 * 6 / 8, rel=1e-12)
