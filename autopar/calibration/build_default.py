"""Regenerate the shipped default calibration model from autopar/data/published_runs.csv.

    python -m autopar.calibration.build_default            # rewrite autopar/data/default_calibration.json
    python -m autopar.calibration.build_default --check    # exit 1 if the shipped file is stale

Deterministic (no random state, no timestamps; same data + same analytical model -> same file) and
takes a few seconds. Re-run it whenever the analytical model (perf/) or the published runs change.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from autopar.calibration.apply.default import (
    _default_fingerprint,
    _try_load,
    build_default_calibration,
    default_artifact_path,
    published_training_sets,
)
from autopar.calibration.evaluation import novelty
from autopar.data import data_path
from autopar.files import write_atomic
from autopar.units import format_duration


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="where to write (default: the packaged file)")
    ap.add_argument("--check", action="store_true", help="only check that the shipped file is current")
    args = ap.parse_args(argv)
    path = default_artifact_path() if args.out is None else args.out
    if args.check:
        ok = _try_load(default_artifact_path(), _default_fingerprint(*published_training_sets())) is not None
        layouts_ok = _layouts_current()
        print(
            "default calibration is current" if ok else "default calibration is STALE: re-run without --check"
        )
        if not layouts_ok:
            print(f"{novelty.REFERENCE_FILE} is STALE: re-run without --check")
        return 0 if ok and layouts_ok else 1
    t0 = time.perf_counter()
    cal = build_default_calibration()
    cal.save(path)
    if args.out is None:
        write_atomic(data_path(novelty.REFERENCE_FILE), _layouts_text())
    print(f"wrote {path} in {format_duration(time.perf_counter() - t0)}: {cal.describe()}")
    print(f"choice: {cal.meta.choice['reason']}")
    return 0


def _layouts_text() -> str:
    """The published runs' LayoutPoints as novelty reads them (autopar/data/published_layouts.json)."""
    doc = novelty.reference_document(novelty.published_points_from_records())
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _layouts_current() -> bool:
    try:
        return data_path(novelty.REFERENCE_FILE).read_text(encoding="utf-8") == _layouts_text()
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
