"""Shared helpers of the bench tests: load a bench script as a module, and check the bench's run files that
are test sets (not calibration data)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "autopar" / "data" / "published_runs.csv"
BENCH = ROOT / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as the module `bench_<name>`, registered in sys.modules (its dataclasses look their module
    up while being built), with bench/ on the path for the scripts that import each other."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


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
