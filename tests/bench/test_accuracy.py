"""bench/accuracy.py runs on any run-record file with the published schema (--data, repeatable)."""

from __future__ import annotations

import pandas as pd
from runfiles import load_bench

from autopar.data import published_runs_path


def _bench():
    return load_bench("accuracy")


def test_accuracy_bench_on_extra_files(tmp_path, capsys):
    df = pd.read_csv(published_runs_path(), dtype=str, keep_default_na=False)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    df[df.source.isin(["korthikanti2022", "bloom176b"])].to_csv(a, index=False)
    extra = df[df.source == "torchtitan_bench"].head(12).copy()
    extra.loc[extra.index[0], "model"] = "no-such-model"  # a row that cannot be evaluated
    extra.loc[extra.index[0], "layers"] = ""
    extra.to_csv(b, index=False)
    assert _bench().main(["--no-published", "--data", str(a), "--data", str(b)]) == 0
    out = capsys.readouterr().out
    for needle in (
        "korthikanti2022",
        "torchtitan_bench",
        "ALL",
        "Spearman",
        "pred. OOM",
        "80% cover",
        "k ",
        "not evaluated",
    ):
        assert needle in out, needle
