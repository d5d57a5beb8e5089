"""Shared checks of the bench's run files that are test sets (not calibration data)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "autopar" / "data" / "published_runs.csv"


def cited_test_set(path: Path) -> pd.DataFrame:
    """The run file at `path` after checking it is one: the published runs' schema, unique ids, every row cited
    (a source reference and verbatim notes), and no source shared with the calibration data."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    pub = pd.read_csv(PUBLISHED, dtype=str, keep_default_na=False)
    assert list(df.columns) == list(pub.columns)
    assert df["id"].is_unique
    assert (df["source_ref"].str.len() > 20).all() and df["notes"].str.startswith("verbatim:").all()
    assert not set(df["source"]) & set(pub["source"])  # a test set: no source shared with calibration data
    return df
