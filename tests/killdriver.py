"""Kill test driver: `--workers 2` runs on one storage, the spawned worker killed with SIGKILL at a
random moment of its search, repeated; one JSON line per round with what the study holds.

Run as a script (`python tests/killdriver.py SPEC ROUNDS BUDGET SEED SLOW_S`), so the spawned workers and
the SIGKILL stay out of the pytest process. SPEC is a journal path template with `{i}` (one file per
round) or a server URL (one study per round). The search evaluates through `slow_estimate` (the
analytical model plus SLOW_S seconds), so both workers are searching when the kill lands: the killer waits
until the worker has evaluated its first strategy (a marker file), then a random 0..KILL_WINDOW_S.
"""

from __future__ import annotations

import collections
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

KILL_WINDOW_S = 0.5
MARKER_ENV = "AUTOPAR_TEST_KILL_MARKER"
SLOW_ENV = "AUTOPAR_TEST_SLOW_S"  # seconds added to each estimate (set by main for the workers too)


def slow_estimate(model: Any, cluster: Any, workload: Any, strategy: Any) -> Any:
    """The analytical estimate, a little slower; the first call in a worker touches the marker."""
    from autopar.perf import estimate

    marker = os.environ.get(MARKER_ENV)
    if marker and mp.current_process().name.startswith("autopar-worker") and not os.path.exists(marker):
        Path(marker).touch()
    time.sleep(float(os.environ.get(SLOW_ENV, "0")))
    return estimate(model, cluster, workload, strategy, check=False)


def _killer(marker: Path, delay: float, killed: list[int], over: threading.Event) -> None:
    """Once the worker has evaluated a strategy, wait `delay` and SIGKILL it (unless the run is over)."""
    while not marker.exists():
        if over.wait(0.01):
            return
    if over.wait(delay):
        return
    for p in mp.active_children():
        if p.name.startswith("autopar-worker"):
            os.kill(p.pid, signal.SIGKILL)
            killed.append(p.pid)


def _check(storage: Any, name: str) -> dict[str, Any]:
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)
    states = collections.Counter(t.state.name for t in study.trials)
    done = [tuple(sorted(t.params.items())) for t in study.trials if t.state.name == "COMPLETE"]
    return {"states": dict(states), "duplicates": len(done) - len(set(done))}


def main(spec: str, rounds: int, budget: int, seed: int, slow_s: float) -> None:
    import optuna

    from autopar.catalog import get_gpu
    from autopar.search.storage import open_storage
    from autopar.search.workers import run_workers
    from autopar.specs import ClusterSpec, ModelSpec, Workload

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(seed)
    tiny = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=2, gpus_per_node=2)
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    server = "://" in spec
    os.environ[SLOW_ENV] = str(slow_s)
    for i in range(rounds):
        marker = folder / f"kill-marker-{os.getpid()}-{i}"
        os.environ[MARKER_ENV] = str(marker)
        where, name = spec.format(i=i), f"kill{i}"
        killed: list[int] = []
        over = threading.Event()
        t = threading.Thread(target=_killer, args=(marker, rng.uniform(0, KILL_WINDOW_S), killed, over))
        t.start()
        kw = dict(
            model=tiny,
            clusters=cluster,
            workload=Workload(seq_len=2048, global_batch=8),
            budget=budget,
            seed=seed + 10 * i,
            storage=where,
            study_name=name,
            min_headroom_gib=2.0,
            estimate_fn=slow_estimate,
            heartbeat_s=1 if server else None,
        )
        try:
            r = run_workers(2, kw)
        finally:
            over.set()
            t.join()
        row = {
            "round": i,
            "killed": len(killed),
            "complete_in_result": r.stats["study_states"].get("COMPLETE"),
        }
        row.update(_check(open_storage(where, create=False) if not server else where, name))
        row["notes"] = [n for n in r.notes if "autopar-worker" in n]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
