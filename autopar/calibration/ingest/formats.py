"""Names of the run-record input formats (a leaf module: the CLI reads them for its help without
importing the record readers, which pull in pandas and the analytical model)."""

from __future__ import annotations

from autopar.calibration.ingest.log_steps import LOG_FORMATS

TABLE_FORMATS = ("csv", "jsonl", "parquet")
FORMATS = ("auto", *TABLE_FORMATS, *LOG_FORMATS)
