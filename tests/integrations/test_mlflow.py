"""`--mlflow` (macs_audit/integrations/mlflow.py) against the real mlflow package: a local SQLite store and an
`mlflow server` started here on 127.0.0.1; what was logged read back with MlflowClient equals the report, the
options and the files the run wrote. Bad input: an unreachable server (one line, exit 4, the outputs kept), a
parameter the active run holds already, the package missing (exit 2, before the audit), a misplaced spec key."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.integrations.mlflow import (
    RELIABILITY_PLOT,
    TrainingCurve,
    log_report,
    metric_names,
    param_values,
    recorded_options,
    safe_name,
)
from macs_audit.progress import Stage
from macs_audit.report import load_report

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
SAMPLE_REPORT = ROOT / "sample_models" / "resnet9_c10_ce.audit.json"  # views, corruptions, robustness
QUICK = ("--bootstrap", "40", "--calibrators", "temperature")
# What MLflow takes in a metric name everywhere (Windows refuses the colon its other platforms allow).
VALID_NAME = r"[A-Za-z0-9_\-. /]+"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Each test in its own folder (MLflow puts a SQLite store's artifacts in ./mlruns), with no tracking
    settings or run of the environment's, and no usage reports sent anywhere."""
    monkeypatch.chdir(tmp_path)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite tracking store for the module (making its tables takes seconds); each test its experiment."""
    pytest.importorskip("mlflow")
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def predictions(tmp_path_factory):
    """Saved predictions of 10 classes: logits whose label is raised, too sharp (a temperature above 1 fits)."""
    rng = np.random.default_rng(0)
    labels = np.arange(600) % 10
    logits = rng.normal(0, 1, (600, 10))
    logits[np.arange(600), labels] += 2.0
    path = tmp_path_factory.mktemp("predictions") / "digits.npz"
    np.savez(path, logits=(logits * 3).astype(np.float32), labels=labels)
    return path


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def client_of(uri):
    import mlflow

    return mlflow.MlflowClient(uri)


def only_run(client, experiment):
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    (logged,) = client.search_runs([found.experiment_id])
    return logged


def artifacts(client, run_id, path=None):
    """Every artifact's path, folders walked."""
    found = []
    for entry in client.list_artifacts(run_id, path):
        found += artifacts(client, run_id, entry.path) if entry.is_dir else [entry.path]
    return sorted(found)


def artifact_text(client, run_id, path, tmp_path):
    return Path(client.download_artifacts(run_id, path, str(tmp_path))).read_text()


def test_evaluate_predictions_logs_the_report_the_options_the_gate_and_the_files(store, predictions, tmp_path):
    """The spec's [mlflow] table turns it on; every metric read back equals the report's, exactly."""
    (tmp_path / "macs-audit.toml").write_text(
        f'[mlflow]\nenabled = true\ntracking_uri = "{store}"\nexperiment = "digits-spec"\n\n[gate]\nmax_ece = 0.5\n'
    )
    result = run(
        "evaluate", "--predictions", predictions, *QUICK, "--config", "macs-audit.toml", "--gate",
        "-o", "audit.json", "--save-predictions", "saved.npz",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "logged to MLflow: run " in result.output
    report = load_report(tmp_path / "audit.json")
    client = client_of(store)
    logged = only_run(client, "digits-spec")
    assert logged.info.status == "FINISHED" and logged.info.run_name == "digits evaluate"
    expected = metric_names(report)
    assert logged.data.metrics == expected  # every name, every value as the report holds it
    assert expected["clean/ece"] == report.clean.metrics["ece"]
    assert expected["clean/aurc"] == report.clean.metrics["aurc"]  # selective prediction: the clean view's
    assert expected["temperature/temperature"] == report.temperature_scaling.temperature
    options = recorded_options(report)
    assert logged.data.params == param_values("evaluate", options)
    assert logged.data.params["evaluate.bootstrap"] == "40" and logged.data.params["evaluate.mlflow"] == "true"
    assert "evaluate.mlflow_tracking_uri" not in logged.data.params  # where it logs, maybe with credentials
    tags = logged.data.tags
    assert tags["macs_audit.command"] == "evaluate" and tags["macs_audit.gate"] == "passed"
    assert tags["macs_audit.verdict"].startswith("audit: ")
    assert tags["macs_audit.schema_version"] == report.schema_version
    run_id = logged.info.run_id
    logged_files = ["audit.json", "saved.npz", "report.json", "gate.json", RELIABILITY_PLOT]
    assert artifacts(client, run_id) == sorted(logged_files)
    assert artifact_text(client, run_id, "report.json", tmp_path / "down") == (tmp_path / "audit.json").read_text()
    assert json.loads(artifact_text(client, run_id, "gate.json", tmp_path / "down"))["passed"] is True


def test_the_metric_names_follow_one_rule_and_mlflow_takes_them(store):
    """A model's report with views and the corruption grid: registry metrics by place, each view's and corruption's
    key metrics, names MLflow accepts; logged through the API and read back equal."""
    report = load_report(SAMPLE_REPORT)
    names = metric_names(report)
    assert all(re.fullmatch(VALID_NAME, name) for name in names), [n for n in names if not re.fullmatch(VALID_NAME, n)]
    robust = report.robust_view()
    assert names["robustness/robust_accuracy"] == report.robustness.robust_accuracy
    assert names["view/noise_blur/ece"] == robust.metrics["ece"]
    assert names["view/gaussian_noise_3/accuracy"] == next(
        v.metrics["accuracy"] for v in report.views if v.name == "gaussian_noise@3"
    )
    assert names["corruption/fog/nll"] == report.corruption_summary.corruptions["fog"].nll
    assert names["corruption/corruption_accuracy"] == report.corruption_summary.mean_accuracy_15
    assert len(names) > 400  # a full grid's views and corruptions
    assert safe_name("noise+blur") == "noise_blur" and safe_name("..") == "__"
    logged = log_report(report, tracking_uri=store, experiment="sample", run_name="sample model")
    client = client_of(store)
    assert client.get_run(logged.run_id).data.metrics == names
    assert not logged.active and client.get_run(logged.run_id).info.run_name == "sample model"


def overconfident_onnx(path, scale=40.0):
    """A linear ONNX classifier fitted to the colour -> label rule of tiny_images, its logits blown up by `scale`."""
    import onnx
    from onnx import numpy_helper

    x, y = tiny_images(400, seed=5)
    features = np.c_[x.mean(axis=(1, 2)) / 255.0, np.ones(len(x))]
    w, *_ = np.linalg.lstsq(features, np.eye(10)[y], rcond=None)
    model = onnx.load(str(linear_onnx(path)))
    for init in model.graph.initializer:
        values = {"w": w[:3], "b": w[3]}.get(init.name)
        if values is not None:
            init.CopyFrom(numpy_helper.from_array((values * scale).astype(np.float32), init.name))
    model.metadata_props.add(key="macs_audit.mean", value="[0, 0, 0]")
    model.metadata_props.add(key="macs_audit.std", value="[1, 1, 1]")
    onnx.save(model, str(path))
    return path


def test_calibrate_logs_the_model_written_the_audit_before_and_the_before_after_table(store, tmp_path):
    model = overconfident_onnx(tmp_path / "model.onnx")
    for name, seed in (("fit", 1), ("test", 2)):
        x, y = tiny_images(200, seed=seed)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    result = run(
        "calibrate", model, "--data", "fit.npz", "--eval-data", "test.npz", "--out", "out", "--device", "cpu",
        "--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--quiet",
        "--mlflow", "--mlflow-tracking-uri", store, "--mlflow-experiment", "calibration",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    before, after = (load_report(out / f"audit_{which}.json") for which in ("before", "after"))
    client = client_of(store)
    logged = only_run(client, "calibration")
    assert logged.info.run_name == "model calibrate"  # named after the model given, not the one written
    assert logged.data.metrics == {**metric_names(after), **metric_names(before, "before/")}
    assert logged.data.metrics["clean/nll"] < logged.data.metrics["before/clean/nll"]
    assert logged.data.params["calibrate.method"] == "temperature" and logged.data.params["calibrate.out"] == "out"
    assert "temperature scaling" in logged.data.tags["macs_audit.which_fix"]
    files = ["audit_before.json", "audit_after.json", "audit_comparison.md", "calibration.json"]
    expected = sorted([*files, "report.json", "before_after.json", RELIABILITY_PLOT])
    assert artifacts(client, logged.info.run_id) == expected
    comparison = json.loads(artifact_text(client, logged.info.run_id, "before_after.json", tmp_path / "down"))
    assert comparison["kind"] == "comparison" and comparison["rows"]


def test_logs_into_the_active_run_and_leaves_it_running(store, predictions):
    """A training script's run: the audit joins it (a parameter the script logged alike is kept); a parameter it holds
    with another value is refused, exit 4, the report written."""
    import mlflow

    mlflow.set_tracking_uri(store)
    try:
        with mlflow.start_run(run_name="train") as active:
            mlflow.log_params({"lr": "0.1", "evaluate.bootstrap": "40"})
            result = run("evaluate", "--predictions", predictions, *QUICK, "-o", "a.json", "--mlflow")
            assert result.exit_code == 0, result.output
            assert f"logged to MLflow: the active run {active.info.run_id}" in result.output
            assert mlflow.active_run().info.run_id == active.info.run_id  # still running
        with mlflow.start_run(run_name="another"):
            mlflow.log_param("evaluate.seed", "7")  # an audit with seed 0 would change it
            again = run("evaluate", "--predictions", predictions, *QUICK, "-o", "b.json", "--mlflow")
        assert again.exit_code == 4, again.output
        assert "already has the parameter evaluate.seed = '7', not '0'" in again.output
        assert load_report("b.json").clean.metrics
    finally:
        mlflow.set_tracking_uri(None)
    logged = client_of(store).get_run(active.info.run_id)
    assert logged.info.status == "FINISHED" and logged.data.params["lr"] == "0.1"  # ended by its script
    assert logged.data.metrics == metric_names(load_report("a.json"))
    assert logged.data.params["evaluate.bootstrap"] == "40" and logged.data.params["evaluate.seed"] == "0"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_against_an_mlflow_server(store, predictions, tmp_path):
    """`mlflow server` on 127.0.0.1 (over the module's store, its tables made already; artifacts proxied): logged
    over HTTP and read back over HTTP. Skipped, saying why, only where the server does not start."""
    client_of(store).search_experiments()  # the tables made: the server starts without migrating
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job workers: a tracking server alone
    server = subprocess.Popen(
        [
            sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", store, "--artifacts-destination", str(tmp_path / "served"),
        ],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "wb"), env=env, start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not healthy(uri):
            if server.poll() is not None or time.monotonic() > deadline:
                log = (tmp_path / "server.log").read_text(errors="replace").strip().splitlines()[-3:]
                pytest.skip(f"mlflow server did not start within 60 s (exit {server.poll()}): {' | '.join(log)}")
            time.sleep(0.3)
        result = run("evaluate", "--predictions", predictions, *QUICK, "-o", "a.json", "--mlflow",
                     "--mlflow-tracking-uri", uri, "--mlflow-run-name", "served")  # fmt: skip
        assert result.exit_code == 0, result.output
        client = client_of(uri)
        logged = only_run(client, "digits")
        assert logged.info.run_name == "served"
        assert logged.data.metrics == metric_names(load_report("a.json"))
        assert artifact_text(client, logged.info.run_id, "a.json", tmp_path / "down") == Path("a.json").read_text()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the uvicorn process it started, in its own group
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_an_unreachable_server_is_one_line_and_exit_4_with_the_outputs_written(predictions, monkeypatch):
    """Nothing listens on the port: a few seconds (the retries cut short), not MLflow's minutes. A failed gate's
    exit code stays 1."""
    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = run("evaluate", "--predictions", predictions, *QUICK, "-o", "a.json", "--mlflow",
                 "--mlflow-tracking-uri", uri)  # fmt: skip
    assert result.exit_code == 4, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert re.fullmatch(
        rf"error: MLflow logging to {re.escape(uri)} failed \(.*Connection refused\); the run's outputs are "
        r"written: check --mlflow-tracking-uri \(or \$MLFLOW_TRACKING_URI\) and the server, or drop --mlflow",
        error,
    ), error
    assert load_report("a.json").clean.metrics["ece"] > 0  # the report is whole
    assert time.monotonic() - started < 30
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # cut for the logging only
    Path("gate.toml").write_text("[gate]\nmax_ece = 0.001\n")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the user's setting wins over the cut retries
    failed = run("evaluate", "--predictions", predictions, *QUICK, "-o", "b.json", "--gate", "--config", "gate.toml",
                 "--mlflow", "--mlflow-tracking-uri", uri)  # fmt: skip
    assert failed.exit_code == 1 and "gate FAILED" in failed.output and "MLflow logging to" in failed.output


def test_without_the_package_it_names_the_extra_before_the_audit(predictions, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    result = run("evaluate", "--predictions", predictions, *QUICK, "-o", "a.json", "--mlflow")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: logging to MLflow (--mlflow) needs the mlflow package, which is not installed: "
        "pip install 'macs-audit[mlflow]'"
    )
    assert not Path("a.json").exists()


def test_the_spec_sets_it_in_its_mlflow_table_only(predictions):
    Path("a.toml").write_text("[evaluate]\nmlflow = true\n")
    result = run("evaluate", "--predictions", predictions, "--config", "a.toml")
    assert result.exit_code == 2
    assert "'mlflow' in a.toml [evaluate] is set in the spec's [mlflow] table, as enabled" in result.output
    Path("b.toml").write_text('[mlflow]\nexperiments = "x"\n')
    result = run("evaluate", "--predictions", predictions, "--config", "b.toml")
    assert result.exit_code == 2 and "unknown key 'experiments' in b.toml [mlflow]; did you mean 'experiment'?" in (
        result.output
    )
    Path("c.toml").write_text("[mlflow]\nexperiment = true\n")
    result = run("evaluate", "--predictions", predictions, "--config", "c.toml")
    assert result.exit_code == 2 and "experiment in c.toml [mlflow] must be a string, got True" in result.output


def test_the_api_logs_a_report_apart():
    """audit() returns its report whatever a store does: the mlflow options are not its keywords."""
    import macs_audit

    with pytest.raises(macs_audit.UsageError, match=r"log_report\(report\)"):
        macs_audit.audit("model.onnx", mlflow=True)


def test_the_training_curve_is_numbered_by_optimizer_step(store):
    """finetune's epoch stages (steps, with their loss terms) and its history: a run resumed inside its second
    epoch records steps 6 to 8 of 8; each epoch's validation sits at its last step."""
    seen = []
    curve = TrainingCurve(lambda *call: seen.append(call))
    epoch = Stage("epoch 2/2", unit="steps")
    for done in (3, 4):  # resumed at step 6: the epoch's 4 steps' last two, 2 of them done before the resume
        curve(epoch, done, 4, {"loss": 1.0 / done, "lr": 0.01})
    curve(Stage("epoch 2/2 validation", unit=""), 1, 1, {"val_acc": 0.5})  # not a step
    curve(Stage("audit after: clean"), 10, 10, None)
    history = [{"step": 4, "val": {"accuracy": 0.4, "ece": 0.2}}, {"step": 8, "val": {"accuracy": 0.5, "ece": 0.1}}]
    points = curve.points(history)
    assert points == [
        (7, {"train/loss": 1 / 3, "train/lr": 0.01}),
        (8, {"train/loss": 0.25, "train/lr": 0.01}),
        (4, {"val/accuracy": 0.4, "val/ece": 0.2}),
        (8, {"val/accuracy": 0.5, "val/ece": 0.1}),
    ]
    assert len(seen) == 4  # every call passed on
    import dataclasses

    from macs_audit.integrations.mlflow import RunRecord, Tracking, log_run

    logged = log_run(Tracking(store, "curve"), dataclasses.replace(RunRecord("finetune", {}, name="m"), curve=points))
    history_of = client_of(store).get_metric_history
    assert [(m.step, m.value) for m in history_of(logged.run_id, "train/loss")] == [(7, 1 / 3), (8, 0.25)]
    assert [(m.step, m.value) for m in history_of(logged.run_id, "val/ece")] == [(4, 0.2), (8, 0.1)]


def test_a_tracking_uri_is_shown_without_its_credentials():
    from macs_audit.integrations.mlflow import shown_uri

    assert shown_uri("https://user:secret@mlflow.example.com:5000/x") == "https://mlflow.example.com:5000/x"
    assert shown_uri("sqlite:///mlflow.db") == "sqlite:///mlflow.db"
