"""Reading run records in: tables (CSV, JSONL, Parquet) and training logs (Megatron-LM, torchtitan),
validated, written to the run store."""
