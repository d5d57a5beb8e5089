"""The run store on a real PostgreSQL server (issue 47): `--store postgresql://...` (or $AUTOPAR_STORE) holds
the same records as a SQLite file given the same input, concurrent ingests store each fingerprint once,
`remove` is all-or-nothing, and a server that cannot be used is one line naming the URL, password masked.

The server is started by tests/pgserver.py (initdb + pg_ctl on a free port in a temp dir). Outside CI a
machine without the server binaries skips; with CI=true the tests fail instead. Each test works in a
database of its own.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.calibration.ingest.ingest import check_file
from autopar.calibration.records.record import fingerprint
from autopar.calibration.store.run_store import RunStore
from autopar.cli import app
from autopar.cli.calibrate import gather_records
from autopar.data import published_runs_path
from autopar.errors import DataError, MissingExtraError, StorageError

sys.path.insert(0, str(Path(__file__).parents[1]))
from pgserver import PostgresUnavailable, free_port, postgres_server  # noqa: E402

psycopg = pytest.importorskip("psycopg")

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-47-Zq9x"  # distinctive: any output that holds it printed the password
runner = CliRunner()
with published_runs_path().open(newline="", encoding="utf-8") as _fh:
    _READER = csv.DictReader(_fh)
    HEADER, ROWS = list(_READER.fieldnames or []), list(_READER)
RECORDS = check_file(published_runs_path()).records  # the same rows, validated (106 runs)


@pytest.fixture(scope="module")
def server():
    try:
        with postgres_server(password=PASSWORD) as url:
            yield url
    except PostgresUnavailable as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL server could not start in CI: {e}")
        pytest.skip(f"no PostgreSQL server: {e}")


def _database(server: str, name: str) -> str:
    """A new, empty database on the server; its URL."""
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    return server.rsplit("/", 1)[0] + "/" + name


def _masked(url: str, password: str = PASSWORD) -> str:
    return url.replace(password, "***")


def _runs_file(path: Path, rows: list[dict[str, str]]) -> Path:
    """A CSV of published-run rows, as a team member would ingest it."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=HEADER)
        w.writeheader()
        w.writerows(rows)
    return path


def _cli(*args: str) -> object:
    r = runner.invoke(app, list(args))
    assert PASSWORD not in r.output, r.output
    return r


def _ok_json(*args: str) -> dict:
    r = _cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _one_line_error(r: object, words: str) -> str:
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and "Traceback" not in r.output and len(lines) == 1, r.output
    assert words in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- the CLI on both stores
def test_cli_on_postgres_reads_back_what_sqlite_does(server, tmp_path):
    url = _database(server, "cli")
    sqlite = str(tmp_path / "runs.db")
    a = _runs_file(tmp_path / "a.csv", ROWS[:40])
    b = _runs_file(tmp_path / "b.csv", ROWS[30:70])
    for store in (url, sqlite):
        doc = _ok_json("calibrate", "ingest", str(a), str(b), "--store", store)
        assert doc["added"] == 70 and doc["duplicates"] == 10
    assert doc["store"] == sqlite
    assert _ok_json("calibrate", "list", "--store", url)["store"] == _masked(url)

    def exported(store: str) -> tuple[str, list[dict]]:
        r = _cli("calibrate", "export", "--format", "jsonl", "--store", store)
        assert r.exit_code == 0, r.output
        return r.stdout, _ok_json("calibrate", "list", "--store", store)["runs"]

    text, listed = exported(url)
    assert (text, listed) == exported(sqlite)
    assert len(text.splitlines()) == 70
    assert [json.loads(line) for line in text.splitlines()] == RECORDS[:70]  # the input, in its order
    assert gather_records(url, False, None) == gather_records(sqlite, False, None)  # what `fit` learns from

    ids = [RECORDS[0]["id"], fingerprint(RECORDS[45])]
    for store in (url, sqlite):
        assert _ok_json("calibrate", "remove", *ids, "--store", store)["removed"] == [
            RECORDS[0]["id"],
            RECORDS[45]["id"],
        ]
    assert exported(url) == exported(sqlite)
    assert RunStore(url).count() == 68
    table = _cli("calibrate", "list", "--store", url)
    assert table.exit_code == 0 and f"68 run(s) in {_masked(url)}" in table.output


def test_reingest_adds_nothing(server, tmp_path):
    url = _database(server, "again")
    f = _runs_file(tmp_path / "runs.csv", ROWS[:25])
    assert _ok_json("calibrate", "ingest", str(f), "--store", url)["added"] == 25
    before = [(r.fingerprint, r.ingested_at, r.record) for r in RunStore(url).runs()]
    again = _ok_json("calibrate", "ingest", str(f), "--store", url)
    assert (again["added"], again["duplicates"]) == (0, 25)
    assert [(r.fingerprint, r.ingested_at, r.record) for r in RunStore(url).runs()] == before


def test_autopar_store_variable_is_the_default(server, tmp_path, monkeypatch):
    url = _database(server, "envvar")
    f = _runs_file(tmp_path / "runs.csv", ROWS[:5])
    monkeypatch.setenv("AUTOPAR_STORE", url)
    assert _ok_json("calibrate", "ingest", str(f))["store"] == _masked(url)
    assert RunStore(url).count() == 5
    assert not (tmp_path / "runs.db").exists()
    sqlite = tmp_path / "own.db"  # --store still wins
    assert _ok_json("calibrate", "ingest", str(f), "--store", str(sqlite))["added"] == 5 and sqlite.is_file()


# --------------------------------------------------------------------------- concurrent writers
def _start_together(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


CLI_AT = """
import sys, time
from autopar.cli import main
at = float(sys.argv[1])
time.sleep(max(0.0, at - time.time()))  # every process starts its ingest at the same moment
sys.argv = ["autopar", *sys.argv[2:]]
main()
"""


def test_four_concurrent_cli_ingests_store_each_fingerprint_once(server, tmp_path):
    url = _database(server, "concurrent")  # empty: the four also race to make the tables
    slices = [ROWS[0:50], ROWS[25:75], ROWS[50:106], ROWS[::2]]
    files = [_runs_file(tmp_path / f"part{i}.csv", rows) for i, rows in enumerate(slices)]
    at = str(time.time() + 4.0)
    procs = [
        _start_together(CLI_AT, at, "calibrate", "ingest", str(f), "--store", url, "--json") for f in files
    ]
    results = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert PASSWORD not in out + err
    added = sum(json.loads(out)["added"] for out, _ in results)
    want = {fingerprint(r) for r in RECORDS}
    assert added == len(want) == 106  # each new record counted by exactly one writer
    stored = [r.fingerprint for r in RunStore(url).runs()]
    assert sorted(stored) == sorted(want)  # each fingerprint once


ADD_LOOP = """
import random, sys, time
from autopar.calibration.store.run_store import RunStore
url, at, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
store = RunStore(url)
time.sleep(max(0.0, at - time.time()))
added = 0
for batch in range(ROUNDS):  # each round new records, each writer in its own order: without one writers'
    items = [(f"b{batch}-fp{i:03d}", {"id": f"b{batch}-R{i}"}, "f.csv") for i in range(ITEMS)]
    rng.shuffle(items)  # lock, two writers inserting the same new rows in opposite orders would deadlock
    added += store.add(items[: rng.randint(ITEMS // 2, ITEMS)])
print(added)
"""
ROUNDS, ITEMS = 12, 150


def test_concurrent_adds_in_opposite_orders_neither_fail_nor_duplicate(server):
    url = _database(server, "orders")
    RunStore(url).add([])  # the tables made: the writers below contend for rows only
    at = str(time.time() + 3.0)
    code = ADD_LOOP.replace("ROUNDS", str(ROUNDS)).replace("ITEMS", str(ITEMS))
    procs = [_start_together(code, url, at, str(seed)) for seed in range(4)]
    results = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    stored = [r.fingerprint for r in RunStore(url).runs()]
    assert len(stored) == len(set(stored)) == sum(int(out) for out, _ in results)
    assert len(stored) >= ROUNDS * ITEMS // 2


# --------------------------------------------------------------------------- remove
def test_remove_is_all_or_nothing(server, tmp_path):
    url = _database(server, "remove")
    f = _runs_file(tmp_path / "runs.csv", ROWS[:6])
    _ok_json("calibrate", "ingest", str(f), "--store", url)
    before = RunStore(url).fingerprints()
    r = _cli("calibrate", "remove", RECORDS[0]["id"], "no-such-run", "--store", url)
    _one_line_error(r, "'no-such-run'")
    assert RunStore(url).fingerprints() == before
    assert RunStore(url).remove([RECORDS[1]["id"], RECORDS[2]["id"]]) == [RECORDS[1]["id"], RECORDS[2]["id"]]
    assert RunStore(url).fingerprints() == before - {fingerprint(RECORDS[1]), fingerprint(RECORDS[2])}
    with pytest.raises(DataError, match="no run store at"):
        RunStore(_database(server, "remove_empty")).remove(["R1"])


# --------------------------------------------------------------------------- stores that cannot be used
def _refused(store: str, tmp_path: Path, words: str, password: str = PASSWORD) -> None:
    f = _runs_file(tmp_path / "runs.csv", ROWS[:2])
    for args in (["calibrate", "list"], ["calibrate", "ingest", str(f)], ["calibrate", "export"]):
        r = _cli(*args, "--store", store)
        assert _masked(store, password) in _one_line_error(r, words) and password not in r.output


def test_unreachable_server_is_one_line(tmp_path):
    url = f"postgresql://autopar:{PASSWORD}@127.0.0.1:{free_port()}/postgres"
    _refused(url, tmp_path, "cannot connect")
    with pytest.raises(StorageError):
        RunStore(url).count()


def test_wrong_password_is_one_line_without_either_password(server, tmp_path):
    url = server.replace(PASSWORD, "Wr0ng-pw-Yx7")
    _refused(url, tmp_path, "password authentication failed", "Wr0ng-pw-Yx7")
    with pytest.raises(StorageError, match="password authentication failed"):
        RunStore(url).add([("fp", RECORDS[0], "f.csv")])


def test_missing_database_is_one_line(server, tmp_path):
    _refused(server.rsplit("/", 1)[0] + "/no_such_db", tmp_path, 'database "no_such_db" does not exist')


def test_foreign_database_is_refused_and_left_alone(server, tmp_path):
    url = _database(server, "foreign")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE customers (id INT, name TEXT)")
    _refused(url, tmp_path, "is not an autopar run store: it has tables customers and no runs table")
    with psycopg.connect(url, autocommit=True) as c:
        tables = c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    assert tables == [("customers",)]  # nothing created in a database that is not ours

    url = _database(server, "foreign_runs")  # a `runs` table of someone else's
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE runs (id INT, started TIMESTAMP)")
    _refused(url, tmp_path, "its runs table has no pk, fingerprint, run_id, source, ... columns")


def test_studies_and_runs_share_a_database(server):
    from autopar.search.storage import open_storage

    url = _database(server, "shared")
    open_storage(url)  # Optuna's tables, as `optimize --storage URL` makes them
    assert RunStore(url).add([(fingerprint(r), r, "f.csv") for r in RECORDS[:3]]) == 3
    assert RunStore(url).count() == 3


def test_bad_urls_name_the_option_or_the_variable(tmp_path, monkeypatch):
    r = _cli("calibrate", "list", "--store", f"mysql://u:{PASSWORD}@db/x")
    assert "store=mysql://u:***@db/x: not a run store" in _one_line_error(r, "postgresql://")
    monkeypatch.setenv("AUTOPAR_STORE", f"sqlite://u:{PASSWORD}@x")
    r = _cli("calibrate", "list")
    assert "AUTOPAR_STORE=sqlite://u:***@x" in _one_line_error(r, "not a run store")
    r = _cli("calibrate", "list", "--store", f"postgresql://u:{PASSWORD}@127.0.0.1:notaport/x")
    assert r.exit_code == 2
    _one_line_error(r, "not a PostgreSQL URL")


def test_tune_refuses_a_bad_store_before_any_run(tmp_path):
    args = ["tune", "--runner", "dryrun", "--model", "Llama-3.1-8B", "--gpus", "8"]
    r = _cli(*args, "--runs-dir", str(tmp_path / "runs"), "--store", f"mysql://u:{PASSWORD}@db/x")
    assert "store=mysql://u:***@db/x" in _one_line_error(r, "not a run store")
    assert not (tmp_path / "runs").exists()


def test_the_service_never_takes_a_store_from_a_request():
    from autopar.service.commands import params

    for command in ("calibrate ingest", "calibrate fit", "calibrate plan", "calibrate list"):
        assert "store" not in {p.name for p in params(command)}, command


def test_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` raises ImportError
    with pytest.raises(MissingExtraError) as err:
        RunStore(f"postgresql://u:{PASSWORD}@127.0.0.1:1/x").count()
    assert err.value.extra == "postgres" and "[postgres]" in str(err.value)
    assert "u:***@127.0.0.1" in str(err.value) and PASSWORD not in str(err.value)
    r = _cli("calibrate", "list", "--store", f"postgresql://u:{PASSWORD}@127.0.0.1:1/x")
    _one_line_error(r, "needs psycopg")


# --------------------------------------------------------------------------- both backends, one model
POOL = RECORDS[:10]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, len(POOL) - 1), max_size=6)),
        st.tuples(st.just("remove"), st.lists(st.integers(0, len(POOL)), min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=6,
)


def _apply(store: RunStore, op: str, picks: list[int]) -> object:
    """What one call returned, or the error it raised (its class and message)."""
    try:
        if op == "add":
            return store.add([(fingerprint(POOL[i]), POOL[i], "pool.csv") for i in picks])
        return store.remove([POOL[i]["id"] if i < len(POOL) else "unknown-id" for i in picks])
    except DataError as e:
        return type(e).__name__, str(e).replace(store.location, "STORE")


@pytest.fixture(scope="module")
def model_db(server):
    return _database(server, "model")


@settings(max_examples=15, deadline=None)
@given(ops=OPS)
def test_postgres_and_sqlite_hold_the_same_runs(model_db, tmp_path_factory, ops):
    with psycopg.connect(model_db, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS runs, meta")
    pg = RunStore(model_db)
    lite = RunStore(tmp_path_factory.mktemp("model") / "runs.db")
    for op, picks in ops:
        assert _apply(pg, op, picks) == _apply(lite, op, picks), (op, picks)
        assert [r.fingerprint for r in pg.runs()] == [r.fingerprint for r in lite.runs()]
    assert pg.records() == lite.records() and pg.count() == lite.count()
