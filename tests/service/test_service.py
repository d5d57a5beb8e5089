"""`autopar serve` (issue 47): the CLI's commands over HTTP answer the CLI's numbers, name bad fields in the CLI's
words, refuse writes without the token, bodies over the limit and jobs over the limit, and never a traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

pytest.importorskip("fastapi", reason="the serve extra (scripts/setup.sh test installs it)")

from fastapi.testclient import TestClient  # noqa: E402

from autopar.cli import app as cli_app  # noqa: E402
from autopar.problem import WorkloadConfig  # noqa: E402
from autopar.service.api import Settings, create_app  # noqa: E402
from autopar.service.commands import params, request_model, to_argv  # noqa: E402

TOKEN = "t0ken-for-the-service-tests"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SMALL = {"model": "llama-3.1-8b", "gpus": 8}
runner = CliRunner()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    """One service (its worker processes spawn once) with its own calibration store."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOPAR_HOME", str(tmp_path_factory.mktemp("home")))
        with TestClient(create_app(Settings(token=TOKEN, max_body_bytes=64 * 1024))) as c:
            yield c


def _cli(*argv: str) -> dict:
    res = runner.invoke(cli_app, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_estimate_is_the_clis_answer(client: TestClient) -> None:
    body = {**SMALL, "tp": 2, "micro_batch": 2}
    res = client.post("/api/estimate", json=body)
    assert res.status_code == 200, res.text
    cli = _cli("estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--micro-batch", "2")
    assert res.json()["estimate"] == cli["estimate"]  # every figure, to the last digit


def test_compare_takes_its_labels_as_a_list(client: TestClient) -> None:
    labels = ["TP8+SP DP8/Z1 mb1", "TP4+SP PP2 DP8/Z1 mb1"]
    res = client.post("/api/compare", json={"labels": labels})
    assert res.status_code == 200, res.text
    assert [row["label"] for row in res.json()] == _labels_of(_cli("compare", *labels))


def _labels_of(doc: list) -> list:
    return [row["label"] for row in doc]


def test_an_unknown_field_is_named_with_its_close_match(client: TestClient) -> None:
    res = client.post("/api/estimate", json={"gpuz": 8})
    assert res.status_code == 422
    (d,) = res.json()["detail"]
    assert d["loc"] == ["body", "gpuz"] and "did you mean 'gpu" in d["msg"]


def test_a_bad_value_is_named_in_the_clis_words(client: TestClient) -> None:
    res = client.post("/api/estimate", json={**SMALL, "gpus": "abc"})
    assert res.status_code == 422
    (d,) = res.json()["detail"]
    cli = runner.invoke(cli_app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "abc", "--json"])
    assert cli.exit_code == 2
    assert d["loc"] == ["body", "gpus"] and d["msg"] == cli.stderr.strip().removeprefix("error: ")


@pytest.mark.parametrize("value", ["/etc/passwd", "../config.json", "gpu.yaml", "detect@/etc:2"])
def test_file_paths_are_never_read(client: TestClient, value: str) -> None:
    field = "cluster_name" if value.startswith("detect") else "model"
    res = client.post("/api/estimate", json={field: value})
    assert res.status_code == 422 and res.json()["detail"][0]["loc"] == ["body", field]


def test_server_side_paths_are_not_inputs(client: TestClient) -> None:
    """--out, --calibration and the like name files on the server: no request may set them."""
    names = {p.name for p in params("optimize")}
    assert not names & {"out", "calibration", "storage", "prices", "plotly", "as_json"}
    assert client.post("/api/estimate", json={"out": "/tmp/x.csv"}).status_code == 422


def test_writes_need_the_token(client: TestClient) -> None:
    assert client.post("/api/optimize", json=SMALL).status_code == 401
    bad = {"authorization": "Bearer wrong-token-of-some-length"}
    assert client.post("/api/optimize", json=SMALL, headers=bad).status_code == 401
    assert client.post("/api/calibrate/ingest", json={"records": [{}]}).status_code == 401


def test_a_service_without_a_token_refuses_every_write() -> None:
    with TestClient(create_app(Settings(token=None, quick_workers=1, max_jobs=1))) as c:
        res = c.post("/api/optimize", json=SMALL, headers=AUTH)
        assert res.status_code == 401 and "without a token" in res.json()["detail"][0]["msg"]


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    big = json.dumps({"model": "x" * (70 * 1024)}).encode()
    res = client.post("/api/estimate", content=big, headers={"content-type": "application/json"})
    assert res.status_code == 413

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(80):
            yield b" " * 1024

    res = client.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert res.status_code == 413


def test_optimize_job_answers_the_verdict_and_its_report(client: TestClient) -> None:
    res = client.post("/api/optimize?wait=120", json=SMALL, headers=AUTH)
    assert res.status_code == 200, res.text
    job = res.json()
    assert job["state"] == "done"
    cli = _cli("optimize", "--model", "llama-3.1-8b", "--gpus", "8")
    assert job["result"]["verdict"]["label"] == cli["verdict"]["label"]
    assert job["result"]["verdict"]["tokens_per_s"] == pytest.approx(
        cli["verdict"]["tokens_per_s"], rel=1e-12
    )
    report = client.get(f"/api/jobs/{job['id']}/report")
    assert report.status_code == 200 and 'id="verdict"' in report.text
    assert client.get("/api/jobs").json()[0]["id"] == job["id"]
    assert client.get("/api/jobs/nope").status_code == 404


def test_jobs_over_the_limit_are_429() -> None:
    with TestClient(create_app(Settings(token=TOKEN, quick_workers=1, max_jobs=1))) as c:
        first = c.post("/api/optimize", json={}, headers=AUTH)  # the default 70B problem: about a second
        assert first.status_code == 202
        second = c.post("/api/optimize", json={}, headers=AUTH)
        assert second.status_code == 429 and "max-jobs" in second.json()["detail"][0]["msg"]


def test_advisor_aliases_answer_with_the_commands_numbers(client: TestClient) -> None:
    rec = client.get("/api/parallelism/recommend", params={"model": "llama-3.1-8b", "gpus": 8})
    assert rec.status_code == 200
    assert (
        rec.json()["label"] == _cli("optimize", "--model", "llama-3.1-8b", "--gpus", "8")["verdict"]["label"]
    )
    val = client.get("/api/parallelism/validate", params={"model": "llama-3.1-8b", "tp": 2, "dp": 4})
    assert val.status_code == 200 and val.json()["valid"] is True  # TP2 x DP4 = 8 GPUs
    slurm = client.get(
        "/api/parallelism/slurm", params={"model": "llama-3.1-8b", "nodes": 2, "tp": 8, "name": "j1"}
    )
    assert "#SBATCH --job-name=j1" in slurm.json()["slurm"] and "#SBATCH --nodes=2" in slurm.json()["slurm"]
    bad = client.get("/api/parallelism/slurm", params={"nodez": 2})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "nodez"]
    index = client.get("/api/parallelism/").json()
    assert {e["path"].rsplit("/", 1)[1] for e in index["endpoints"]} >= {
        "recommend",
        "pareto",
        "slurm",
        "launch",
        "profile",
        "profiles",
        "analyze-model",
    }


def test_advisor_workload_and_model_aliases_are_the_commands(client: TestClient) -> None:
    # profiles = `autopar profile --json`; profile = optimize with --workload; analyze-model = `models MODEL`
    profiles = client.get("/api/parallelism/profiles")
    assert profiles.status_code == 200 and profiles.json() == _cli("profile")
    pick = client.get(
        "/api/parallelism/profile", params={"model": "llama-3.1-8b", "gpus": 8, "workload": "finetune"}
    )
    cli = _cli("optimize", "--model", "llama-3.1-8b", "--gpus", "8", "--workload", "finetune")
    assert pick.status_code == 200 and pick.json() == {"workload": "finetune", "verdict": cli["verdict"]}
    model = client.get("/api/parallelism/analyze-model", params={"model": "qwen-72b"})
    assert model.status_code == 200 and model.json() == _cli("models", "qwen-72b")[0]
    assert model.json()["total_params"] == 72_287_920_128  # the hand count of tests/catalog/test_catalog.py
    missing = client.get("/api/parallelism/analyze-model")
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["query", "model"]
    rlhf = client.get("/api/parallelism/profile", params={"model": "llama-3.1-8b", "workload": "rlhf"})
    assert rlhf.status_code == 422 and "not planned yet" in rlhf.json()["detail"][0]["msg"]


def test_openapi_descriptions_are_the_clis_help(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "/api/estimate" in spec["paths"] and "/api/parallelism/recommend" in spec["paths"]
    props = request_model("estimate").model_json_schema()["properties"]
    help_of = {p.name: p.help for p in params("estimate")}
    assert props["gpus"]["description"] == help_of["gpus"]
    # the text is the problem tree's (autopar/problem.py), as typed there: no rich-markup escapes
    assert props["global_batch"]["description"] == WorkloadConfig.model_fields["global_batch"].description
    assert props["global_batch"]["description"].startswith(
        "Global batch (sequences per step; 2K = 2,048) [default: 512"
    )


def test_ingest_writes_once_and_lists(client: TestClient) -> None:
    record = {
        "id": "SVC-1", "source": "service-test", "model": "GPT-test", "arch": "dense", "layers": 96,
        "hidden": 12288, "ffn_hidden": 49152, "heads": 96, "kv_heads": 96, "vocab": 51200, "seq_len": 2048,
        "gpu": "A100-80GB", "num_gpus": 64, "gpus_per_node": 8, "tp": 8, "pp": 8, "dp": 1, "cp": 1, "ep": 1,
        "sp": 1, "zero": 0, "recompute": "selective", "micro_batch": 1, "global_batch": 64, "precision": "bf16",
        "framework": "Megatron-LM", "measured_step_s": 13.75,
    }  # fmt: skip
    first = client.post("/api/calibrate/ingest", json={"records": [record]}, headers=AUTH)
    assert first.status_code == 200, first.text
    again = client.post("/api/calibrate/ingest", json={"records": [record]}, headers=AUTH)
    assert first.json()["added"] == 1 and again.json()["added"] == 0  # idempotent
    runs = client.get("/api/calibrate/runs").json()
    assert [r["id"] for r in runs["runs"]] == ["SVC-1"]


@pytest.mark.parametrize(
    "body", [b"[1, 2]", b'{"model": {"a": 1}}', b'{"gpus": 1e999}', b"\xff\xfe", b'{"sp": "maybe"}']
)
def test_malformed_bodies_are_one_line_never_a_traceback(client: TestClient, body: bytes) -> None:
    res = client.post("/api/estimate", content=body, headers={"content-type": "application/json"})
    assert 400 <= res.status_code < 500, res.text
    assert "Traceback" not in res.text and all("\n" not in d["msg"] for d in res.json()["detail"])


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from([p.name for p in params("estimate")]), st.integers(1, 64), max_size=5))
def test_to_argv_emits_only_the_commands_own_options(body: dict) -> None:
    """Property: every option a body turns into is one the command declares (its flag or its off switch)."""
    from autopar.service.commands import _command

    declared = {o for p in _command("estimate").params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
    flags = {p.name for p in params("estimate") if p.kind == "flag"}
    argv = to_argv("estimate", {k: bool(v % 2) if k in flags else v for k, v in body.items()})
    assert argv[0] == "estimate" and argv[-1] == "--json"
    assert {a for a in argv[1:] if a.startswith("--")} <= declared


def test_an_optimize_job_keeps_its_study_to_follow_and_report(client: TestClient) -> None:
    """A job's study is in the service's storage: listed, its status complete == budget when done, its Pareto
    read as `study report` reads it; an unknown study is a 404 that does not show where the storage is."""
    body = {**SMALL, "sampler": "nsga2", "budget": 60}
    job = client.post("/api/optimize?wait=120", json=body, headers=AUTH).json()
    assert job["state"] == "done", job
    name = f"serve-{job['id']}"
    assert name in [s["name"] for s in client.get("/api/studies").json()["studies"]]
    status = client.get(f"/api/studies/{name}").json()
    assert status["complete"] == status["budget"] == 60
    pareto = client.get(f"/api/studies/{name}/pareto").json()
    assert pareto["verdict"]["label"] == job["result"]["verdict"]["label"]
    assert client.get(f"/api/studies/{name}/report").text.count('id="verdict"') == 1
    missing = client.get("/api/studies/no-such-study")
    assert missing.status_code == 404 and "serve-studies" not in missing.text
    assert client.get("/api/studies/bad name!").status_code == 422


def test_a_training_log_in_then_a_fit_says_what_it_changed(client: TestClient) -> None:
    """The examples/ Megatron-LM log with its sidecar's fields as ingest options, then a fit for that cluster:
    the same run the CLI stores (read back), and the fit's plain-words summary in the answer."""
    from pathlib import Path

    log = (Path(__file__).resolve().parents[2] / "examples" / "megatron_llama3_8b.log").read_text()
    body = {
        "log": log,
        "format": "megatron-log",
        "model": "Llama-3.1-8B",
        "gpu": "H100-SXM",
        "group": "svc-lab",
    }
    assert client.post("/api/calibrate/ingest-log", json=body).status_code == 401  # a write
    res = client.post("/api/calibrate/ingest-log", json=body, headers=AUTH)
    assert res.status_code == 200, res.text
    assert res.json()["added"] == 1
    stored = [r for r in client.get("/api/calibrate/runs").json()["runs"] if r.get("source") == "svc-lab"]
    assert len(stored) == 1 and stored[0]["gpu"] == "H100-SXM" and stored[0]["num_gpus"] == 8
    bad = client.post("/api/calibrate/ingest-log", json={**body, "format": "nemo"}, headers=AUTH)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "format"]
    fit = client.post("/api/calibrate/fit", json={"group": "svc-lab"}, headers=AUTH)
    assert fit.status_code == 200, fit.text
    assert fit.json()["summary"]


def test_no_request_input_chooses_the_command(client: TestClient) -> None:
    """A query parameter named like a closure's argument must not pick another command (say `tune`)."""
    plain = client.get("/api/models").json()
    assert client.get("/api/models", params={"_name": "tune", "name": "gpus"}).json() == plain
    assert client.get("/compare", params={"_name": "runs"}).text == client.get("/compare").text


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["/api/estimate", "/api/compare", "/api/fix", "/api/launch", "/api/calibrate/plan"]),
    st.dictionaries(
        st.sampled_from(["model", "gpu", "gpus", "tp", "pp", "seq_len", "labels", "strategy", "zz"]),
        JSONISH,
        max_size=4,
    ),
)
def test_any_body_is_an_answer_or_one_line_never_a_500(client: TestClient, path: str, body: dict) -> None:
    """Property (issue 47's bad input): whatever JSON arrives, the service answers 200 or a 4xx whose every
    message is one line; never a 5xx, never a traceback."""
    res = client.post(path, json=body)
    assert res.status_code < 500, (path, body, res.text)
    if res.status_code >= 400:
        assert all("\n" not in d["msg"] and "Traceback" not in d["msg"] for d in res.json()["detail"]), (
            res.text
        )


def test_a_tune_sharing_the_storage_is_listed_with_its_runs(client: TestClient, tmp_path) -> None:
    """A tune run on the service's storage (`autopar tune --storage`) shows under /api/tunes, and its runs under
    /api/tunes/{name} as `autopar study runs` prints them; an unknown one is a 404."""
    storage = client.app.state.settings.studies
    script = tmp_path / "fake.sh"
    script.write_text('printf \'{"status": "ok", "tokens_per_s_per_gpu": 1000}\' > "$AUTOPAR_RESULT"\n')
    labels = tmp_path / "labels.txt"
    labels.write_text("TP8+SP DP8/Z1 mb1\nTP8+SP PP2 DP4/Z1 mb1\n")
    argv = ["tune", "--runner", f"cmd:sh {script}", "--candidates", str(labels), "--storage", storage]
    argv += ["--study-name", "team-tune", "--runs-dir", str(tmp_path / "runs"), "--no-store", "--json"]
    res = runner.invoke(cli_app, argv)
    assert res.exit_code == 0, res.output
    listed = client.get("/api/tunes").json()["tunes"]
    assert [t["name"] for t in listed] == ["team-tune"] and listed[0]["candidates"] == 2
    runs = client.get("/api/tunes/team-tune").json()
    assert runs == _cli("study", "runs", "--storage", storage, "--study-name", "team-tune")
    assert runs["runs"][0]["measured"] == 1000 and runs["stopped"]["rule"] in ("confident", "exhausted")
    assert client.get("/api/tunes/no-such-tune").status_code == 404


def test_advisor_sharding_is_compare_over_the_zero_stages(client: TestClient) -> None:
    # sharding?model=&dp= = `compare DP8/Z0 DP8/Z1 DP8/Z2 DP8/Z3` on dp GPUs: the memory each ZeRO stage leaves
    res = client.get("/api/parallelism/sharding", params={"model": "llama-3.1-8b", "dp": 8})
    assert res.status_code == 200, res.text
    doc = res.json()
    cli = _cli("compare", "DP8/Z0", "DP8/Z1", "DP8/Z2", "DP8/Z3", "--model", "llama-3.1-8b", "--gpus", "8")
    assert [s["memory_gib"] for s in doc["stages"]] == [r["memory_gib"] for r in cli]
    optimizer = [s["memory_gib"]["optimizer"] for s in doc["stages"]]
    # ZeRO-1 shards the optimizer states over the 8 ranks: 1/8 of DDP's (the stages' completions may differ
    # in other knobs, never in what the optimizer holds)
    assert optimizer[1] == pytest.approx(optimizer[0] / 8, rel=1e-6) and optimizer[3] <= optimizer[1]
    missing = client.get("/api/parallelism/sharding", params={"model": "llama-3.1-8b"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["query", "dp"]


def test_advisor_compare_sets_models_side_by_side(client: TestClient) -> None:
    res = client.get("/api/parallelism/compare", params={"models": "llama-7b,qwen-72b"})
    assert res.status_code == 200, res.text
    assert res.json()["models"] == [_cli("models", "llama-7b")[0], _cli("models", "qwen-72b")[0]]
    typo = client.get("/api/parallelism/compare", params={"models": "llama-7b,qwen-27b"})
    assert typo.status_code == 422 and typo.json()["detail"][0]["loc"] == ["query", "models"]
    assert "did you mean" in typo.json()["detail"][0]["msg"]
    one = client.get("/api/parallelism/compare", params={"models": "llama-7b"})
    assert one.status_code == 422 and "two or more" in one.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workload": "rlhf"}, "workload"),
        ({"finetune": "lora", "lora_targets": "linear_qv"}, "lora_targets"),
        ({"lora_base": "nf4"}, "lora_base"),
    ],
)
def test_a_refused_new_input_names_its_field(client: TestClient, body: dict, field: str) -> None:
    # the CLI's one-line refusal ('--workload rlhf: ...') answers 422 at the body field it names
    res = client.post("/api/estimate", json={**SMALL, **body})
    assert res.status_code == 422 and res.json()["detail"][0]["loc"] == ["body", field]
    assert res.json()["detail"][0]["msg"].startswith(f"--{field.replace('_', '-')} ")
