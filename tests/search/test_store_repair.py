"""Damaged or foreign stores (issue 45): a journal with a foreign or garbled record is named by line and
byte and `autopar study repair` keeps its valid prefix; a SQLite file that is not a run store, or not a
readable SQLite study, is refused in one line; an output path on /proc says why it cannot be written."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from autopar.calibration.store.run_store import RunStore
from autopar.catalog import get_gpu
from autopar.cli import app
from autopar.errors import AutoparError, DataError, OutputError
from autopar.files import reason, write_atomic
from autopar.search import optimize
from autopar.search.storage import JOURNAL_FIELDS, journal_record, open_storage, repair_journal
from autopar.specs import ClusterSpec, ModelSpec, Workload

TINY = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
CLUSTER = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=2, gpus_per_node=2)
WL = Workload(seq_len=2048, global_batch=8)
runner = CliRunner()
SMALL = ["--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "5", "--no-calibration"]
BAD_LINES = [
    b'{"op_code": 99}\n',  # foreign: an operation Optuna does not have
    b"a line of plain text\n",  # garbled
    b'{"op_code": 4, "worker_id": "w"}\n',  # a known op without the fields replaying it reads
    b'{"op_code": 6, "worker_id": "w", "trial_id": 0, "state": 1, "values": null}\n',  # no datetime_complete
    b"[1, 2]\n",
    b"\xff\xfe\n",
]


def _one_line_error(r, code: int = 2) -> str:
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == code and "Traceback" not in r.output and len(lines) == 1, r.output
    return lines[0]


def _complete(storage: str) -> int:
    study = optuna.load_study(study_name="s", storage=open_storage(storage, create=False))
    return sum(t.state == TrialState.COMPLETE for t in study.trials)


@pytest.fixture(scope="module")
def journal_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("journal") / "s.journal"
    optimize(
        TINY, CLUSTER, WL, budget=6, storage=str(path), study_name="s", min_headroom_gib=2.0, sampler="nsga2"
    )
    return path


@pytest.fixture()
def journal(journal_template, tmp_path) -> Path:
    path = tmp_path / "s.journal"
    path.write_bytes(journal_template.read_bytes())
    return path


def test_journal_op_codes_match_the_installed_optuna():
    from optuna.storages.journal._storage import JournalOperation  # private: the stored format's source

    assert set(JOURNAL_FIELDS) == {int(op) for op in JournalOperation}


def test_every_record_autopar_writes_is_accepted(journal):
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) > 10 and all(journal_record(line) for line in lines)


@pytest.mark.parametrize("bad", BAD_LINES)
def test_bad_record_is_named_and_repair_keeps_every_trial(journal, bad):
    good = journal.read_bytes()
    records, complete = good.count(b"\n"), _complete(str(journal))
    assert complete == 6
    journal.write_bytes(good + bad)
    r = runner.invoke(app, ["study", "status", "--storage", str(journal)])
    line = _one_line_error(r)
    assert f"line {records + 1} (byte {len(good)})" in line and "study repair" in line, line
    r = runner.invoke(app, ["optimize", *SMALL, "--storage", str(journal)])
    _one_line_error(r)  # refused on opening: nothing appended after the bad record
    assert journal.read_bytes() == good + bad
    r = runner.invoke(app, ["study", "repair", str(journal)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert f"kept {records} records, dropped 1 line" in r.output, r.output
    assert journal.read_bytes() == good
    assert Path(f"{journal}.bak").read_bytes() == good + bad
    assert _complete(str(journal)) == complete
    r = runner.invoke(app, ["study", "status", "--storage", str(journal), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["complete"] == complete, r.output


def test_bad_record_in_the_middle_drops_the_rest_and_out_leaves_the_original(journal, tmp_path):
    lines = journal.read_bytes().splitlines(keepends=True)
    damaged = b"".join(lines[:5]) + b"garbage\n" + b"".join(lines[5:]) + b'{"op_co'  # and a torn tail
    journal.write_bytes(damaged)
    with pytest.raises(AutoparError, match=r"line 6 \(byte \d+\)") as err:
        optuna.load_study(study_name="s", storage=open_storage(str(journal)))
    assert "\n" not in str(err.value)
    fixed = tmp_path / "fixed.journal"
    r = runner.invoke(app, ["study", "repair", str(journal), "--out", str(fixed)])
    assert r.exit_code == 0 and f"kept 5 records, dropped {len(lines) - 3} lines" in r.output, r.output
    assert journal.read_bytes() == damaged and not Path(f"{journal}.bak").exists()
    assert fixed.read_bytes() == b"".join(lines[:5])
    assert optuna.load_study(study_name="s", storage=open_storage(str(fixed))).study_name == "s"


def test_record_appended_by_another_writer_while_open_is_one_line(journal):
    storage = open_storage(str(journal))
    study = optuna.load_study(study_name="s", storage=storage)
    with open(journal, "ab") as f:
        f.write(b'{"op_code": 99}\n')
    with pytest.raises(AutoparError, match="is not an Optuna journal record"):
        study.get_trials()  # Optuna's replay used to stop on `assert False, "Should not reach."`


def test_repair_on_a_sound_journal_or_a_non_journal_writes_nothing(journal, tmp_path):
    good = journal.read_bytes()
    done = repair_journal(str(journal))
    assert done.out is None and done.dropped == 0 and journal.read_bytes() == good
    r = runner.invoke(app, ["study", "repair", str(journal)])
    assert r.exit_code == 0 and "nothing to repair" in r.output, r.output
    other = tmp_path / "notes.txt"
    other.write_bytes(b"hello\n" + good)
    r = runner.invoke(app, ["study", "repair", str(other)])
    assert "not an Optuna journal" in _one_line_error(r)
    assert other.read_bytes() == b"hello\n" + good and sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "s.journal",
    ]
    r = runner.invoke(app, ["study", "status", "--storage", str(other)])
    assert "line 1 is not a record" in _one_line_error(r)


def test_repeated_repairs_keep_every_backup(journal):
    good = journal.read_bytes()
    for n, bad in enumerate(BAD_LINES[:2]):
        journal.write_bytes(good + bad)
        assert repair_journal(str(journal)).backup == Path(f"{journal}.bak" + (f".{n}" if n else ""))
    assert Path(f"{journal}.bak").read_bytes() == good + BAD_LINES[0]
    assert Path(f"{journal}.bak.1").read_bytes() == good + BAD_LINES[1]


# ------------------------------------------------------------------------------------- run store
def _sqlite(path: Path, *ddl: str) -> bytes:
    conn = sqlite3.connect(path)
    for statement in ddl:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    "ddl, words",
    [
        (("CREATE TABLE runs (a, b)", "INSERT INTO runs VALUES (1, 2)"), "its runs table has no pk"),
        (("CREATE TABLE samples (x)",), "it has tables samples and no runs table"),
        (("CREATE TABLE runs (a)", "CREATE TABLE meta (k, v)"), "its runs table has no"),
    ],
)
def test_foreign_sqlite_file_is_not_a_run_store(tmp_path, ddl, words):
    path = tmp_path / "foreign.db"
    before = _sqlite(path, *ddl)
    for cmd in (["calibrate", "list"], ["calibrate", "fit", "--out", str(tmp_path / "m.json")]):
        r = runner.invoke(app, [*cmd, "--store", str(path)])
        line = _one_line_error(r, r.exit_code)
        assert r.exit_code != 0 and "is not an autopar run store" in line and words in line, r.output
    with pytest.raises(DataError, match="is not an autopar run store"):
        RunStore(path).add([("fp", {"id": "R1"}, "f.csv")])
    assert path.read_bytes() == before  # nothing created in a file that is not ours


def test_run_store_still_opens_new_and_own_files(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    assert store.count() == 0
    assert store.add([("fp", {"id": "R1"}, "f.csv")]) == 1
    assert RunStore(tmp_path / "runs.db").count() == 1
    empty = tmp_path / "empty.db"
    empty.touch()
    assert RunStore(empty).add([("fp", {"id": "R1"}, "f.csv")]) == 1


# --------------------------------------------------------------------------- messages, not causes
@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs Linux /proc")
def test_output_on_proc_names_the_real_cause(journal):
    with pytest.raises(OutputError) as err:
        write_atomic("/proc/version", "x")
    assert "folder does not exist" not in str(err.value) and "proc file system" in str(err.value)
    r = runner.invoke(
        app, ["study", "report", "--storage", str(journal), "--no-calibration", "--out", "/proc/version"]
    )
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error")]  # after the printed result
    assert r.exit_code != 0 and "Traceback" not in r.output and len(errors) == 1, r.output
    assert "'/proc/version'" in errors[0] and "proc file system" in errors[0], r.output


def test_missing_file_in_an_existing_folder_is_not_a_missing_folder(tmp_path):
    import errno

    why = reason(tmp_path / "x.html", OSError(errno.ENOENT, "No such file or directory"))
    assert "folder does not exist" not in why and "does not accept new files" in why
    assert reason(tmp_path / "no" / "x.html", OSError(errno.ENOENT, "")) == "its folder does not exist"


def _sqlite_study(path: Path) -> None:
    study = optuna.create_study(
        storage=open_storage(f"sqlite:///{path}"), study_name="s", directions=["maximize"]
    )
    for i in range(30):
        study.add_trial(optuna.trial.create_trial(params={"x": i}, distributions={
            "x": optuna.distributions.IntDistribution(0, 100)}, value=float(i)))  # fmt: skip


@pytest.mark.parametrize("damage", ["pages", "not-a-database"])
def test_corrupt_sqlite_study_is_one_line_naming_the_file(tmp_path, damage):
    path = tmp_path / "study.db"
    _sqlite_study(path)
    data = bytearray(path.read_bytes())
    if damage == "pages":  # every page after the first: the header is intact, the tables are not
        rng = random.Random(45)
        data[4096:] = bytes(rng.randrange(256) for _ in range(len(data) - 4096))
    else:
        data[:100] = b"x" * 100
    path.write_bytes(bytes(data))
    url = f"sqlite:///{path}"
    for args in (
        ["study", "status", "--storage", url],
        ["study", "report", "--storage", url, "--no-calibration"],
    ):
        line = _one_line_error(runner.invoke(app, args))
        assert f"'{path}' is not a readable SQLite study" in line and "max length" not in line, line
    r = runner.invoke(app, ["optimize", *SMALL, "--storage", url])
    assert "is not a readable SQLite study" in _one_line_error(r)
