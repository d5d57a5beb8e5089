"""Published tables copy rows between systems; a copied cell shows as a batch that does not add up. Every
Megatron-Bridge / NeMo record that prints its gradient-accumulation count satisfies GA x MBS x data parallel =
GBS as printed, or says in its notes why not ("corrected:" with the evidence, or "inconsistent as printed")."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from runfiles import ROOT

FRONTIER = ROOT / "bench" / "data" / "frontier_runs.csv"


def _frontier() -> pd.DataFrame:
    return pd.read_csv(FRONTIER, dtype=str, keep_default_na=False)


_PRINTED = re.compile(r"\b(GA|MBS|GBS)=(\d+)")


def _printed(notes: str) -> dict[str, int]:
    verbatim = notes.split("; derived")[0]  # the table's own cells, before any derivation
    return {k: int(v) for k, v in _PRINTED.findall(verbatim)}


def test_batches_add_up_or_say_why() -> None:
    df = _frontier()
    checked, explained = 0, set()
    for _, r in df.iterrows():
        cells = _printed(r["notes"])
        if not {"GA", "MBS", "GBS"} <= cells.keys() or r["source"] != "mbridge_perf_summary":
            continue
        dp = int(r["num_gpus"]) // (int(r["tp"] or 1) * int(r["pp"] or 1) * int(r["cp"] or 1))
        checked += 1
        if cells["GA"] * cells["MBS"] * dp != cells["GBS"]:
            assert "corrected:" in r["notes"] or "inconsistent as printed" in r["notes"], r["id"]
            explained.add(r["id"])
    assert checked >= 25  # 27 rows print all three (issue 21, seventh session)
    # the two rows found in issue 21's seventh session: MBR-082's MBS is the B200 row's (corrected to 1),
    # MBR-065's GA gives half its GBS (left as printed)
    assert explained == {"MBR-065", "MBR-082"}


def test_the_corrected_row_adds_up_with_its_column() -> None:
    """MBR-082's column micro-batch (1) with the preset's PP=4 on 64 GPUs gives GA = 512 / (1 x 16) = 32."""
    df = _frontier().set_index("id")
    r = df.loc["MBR-082"]
    dp = int(r["num_gpus"]) // (int(r["tp"]) * int(r["pp"]) * int(r["cp"]))
    assert (int(r["micro_batch"]), dp) == (1, 16)
    assert int(r["global_batch"]) / (int(r["micro_batch"]) * dp) == pytest.approx(32)
    assert "GA = 512/16 = 32" in r["notes"]


def test_recipe_bench_only_names_what_it_matched(capsys) -> None:
    """bench/recipes.py --only that selects nothing is one line, exit 2: held-out ids need --heldout, and a
    typo gets the close ids."""
    from runfiles import load_bench

    recipes = load_bench("recipes")
    assert recipes.main(["--only", "NAM-001"]) == 2
    assert "matches 1 held-out problem(s) only: add --heldout" in capsys.readouterr().err
    assert recipes.main(["--only", "MBR-9999"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no problem id or model; did you mean MBR-0" in err
