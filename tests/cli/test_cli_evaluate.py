"""`macs-audit evaluate` through typer's CliRunner: happy paths (bad inputs: tests/cli/test_bad_input.py)."""

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.report import SCHEMA_VERSION

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_evaluate_onnx_writes_report_and_predictions(tmp_path, onnx_model, npz_data):
    report, preds = tmp_path / "out" / "report.json", tmp_path / "preds.npz"
    result = run(
        "evaluate",
        onnx_model,
        "--data",
        npz_data,
        "-o",
        report,
        "--save-predictions",
        preds,
        "--bootstrap",
        "50",
        "--calibration-split",
        "0.5",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["model"]["provider"] == "CPUExecutionProvider" and data["model"]["format"] == "onnx"
    assert data["data"]["n"] == 60 and data["conventions"]["ece_bins"] == 15
    from macs_audit.metrics.bootstrap import ERROR_METRICS, MEAN_METRICS

    # The RMS calibration error needs two bins of 100 (metrics/rms_calibration.py): none at 60 images.
    assert set(data["clean"]["intervals"]) == {*MEAN_METRICS, *ERROR_METRICS} - {"rms_calibration_error"}
    assert "rms_calibration_error" not in data["clean"]["metrics"]
    assert data["calibrators"]["methods"][0]["method"] == "uncalibrated"  # the uncalibrated row first
    assert len(data["clean"]["smooth_reliability"]["accuracy"]) == 101
    assert data["temperature_scaling"]["n_fit"] == 30
    # Anyone can recompute every number from the saved predictions.
    saved = np.load(preds)
    from macs_audit.metrics.accumulators import calibration_metrics

    again = calibration_metrics(saved["logits"], saved["labels"], 10)
    assert again["ece"] == pytest.approx(data["clean"]["metrics"]["ece"], abs=1e-12)
    assert "accuracy" in result.stdout


def test_limit_takes_stratified_subset(tmp_path, onnx_model, npz_data):
    report = tmp_path / "r.json"
    result = run("evaluate", onnx_model, "--data", npz_data, "--limit", "20", "-o", report, "--bootstrap", "0")
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["data"]["n"] == 20 and data["clean"]["intervals"] == {}


def test_probability_outputs_are_detected(tmp_path, npz_data):
    logits_model = linear_onnx(tmp_path / "logits.onnx")
    probs_model = linear_onnx(tmp_path / "probs.onnx", softmax=True)
    reports = {}
    for name, model in (("logits", logits_model), ("probs", probs_model)):
        out = tmp_path / f"{name}.json"
        assert run("evaluate", model, "--data", npz_data, "-o", out, "--bootstrap", "0").exit_code == 0
        reports[name] = json.loads(out.read_text())
    assert reports["probs"]["model"]["output"] == "probabilities (detected)"
    assert reports["logits"]["model"]["output"] == "logits (detected)"
    for key in ("accuracy", "ece", "nll", "brier"):
        assert reports["probs"]["clean"]["metrics"][key] == pytest.approx(
            reports["logits"]["clean"]["metrics"][key], abs=1e-5
        )


def test_sidecar_and_metadata_precedence(tmp_path, npz_data):
    import onnxruntime  # noqa: F401

    model = linear_onnx(
        tmp_path / "m.onnx", metadata={"macs_audit.mean": "[0.1, 0.1, 0.1]", "macs_audit.output": '"logits"'}
    )
    (tmp_path / "m.json").write_text(json.dumps({"mean": [0.2, 0.2, 0.2]}))
    out = tmp_path / "r.json"
    assert (
        run("evaluate", model, "--data", npz_data, "-o", out, "--bootstrap", "0", "--std", "0.5,0.5,0.5").exit_code == 0
    )
    model_info = json.loads(out.read_text())["model"]
    assert model_info["mean"] == [0.2, 0.2, 0.2] and model_info["config_sources"]["mean"] == "sidecar"
    assert model_info["std"] == [0.5, 0.5, 0.5] and model_info["config_sources"]["std"] == "flag"
    assert model_info["output"] == "logits (declared)" and model_info["config_sources"]["output"] == "metadata"


def test_state_dict_and_torchscript(tmp_path, npz_data):
    import timm
    import torch
    from safetensors.torch import save_file

    from macs_audit.models import architectures  # noqa: F401

    model = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
    torch.save(model.state_dict(), tmp_path / "w.pt")
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    torch.jit.trace(model, torch.zeros(1, 3, 32, 32)).save(str(tmp_path / "w_ts.pt"))
    results = {}
    for name, extra in (
        ("w.pt", ["--arch", "macs_resnet9_c10"]),
        ("w.safetensors", ["--arch", "macs_resnet9_c10"]),
        ("w_ts.pt", []),
    ):
        out = tmp_path / f"{name}.json"
        result = run("evaluate", tmp_path / name, "--data", npz_data, "-o", out, "--bootstrap", "0", *extra)
        assert result.exit_code == 0, result.output
        results[name] = json.loads(out.read_text())
    assert results["w.pt"]["model"]["format"] == "state-dict" and results["w.pt"]["model"]["num_classes"] == 10
    assert results["w_ts.pt"]["model"]["format"] == "torchscript"
    ref = results["w.pt"]["clean"]["metrics"]
    for name in ("w.safetensors", "w_ts.pt"):
        assert results[name]["clean"]["metrics"]["nll"] == pytest.approx(ref["nll"], abs=1e-5)


def test_pickled_module_loads_with_the_flag(tmp_path, npz_data):
    import torch

    module = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 10))
    torch.save(module, tmp_path / "module.pt")
    result = run(
        "evaluate", tmp_path / "module.pt", "--data", npz_data, "--trust-pickled-model-code", "--bootstrap", "0"
    )
    assert result.exit_code == 0, result.output


def _strict_json(text: str):
    """json.loads that refuses Infinity and NaN, which strict JSON readers (jq, browsers) reject."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


@pytest.mark.parametrize("flag", ["--limit", "--sensitivity-samples"])
def test_one_image_gives_null_intervals_with_the_reason_not_inf(tmp_path, onnx_model, npz_data, flag):
    report = tmp_path / "r.json"
    result = run("evaluate", onnx_model, "--data", npz_data, flag, "1", "-o", report, "--bootstrap", "50")
    assert result.exit_code == 0, result.output
    data = _strict_json(report.read_text())
    sens = data["robustness"]["sensitivity"]
    assert sens["n"] == 1 and sens["lipschitz_error"] is None
    assert sens["lipschitz_error_note"] == "needs at least 2 images"
    assert "inf" not in result.stdout and "n/a (needs" in result.stdout
    if flag == "--limit":
        assert data["clean"]["intervals"] == {}
        assert data["conventions"]["bootstrap_note"] == "no intervals: a bootstrap needs at least 2 samples, got 1"
        assert "n/a (n = 1)" in result.stdout
    else:
        from macs_audit.metrics.bootstrap import ERROR_METRICS, MEAN_METRICS

        assert set(data["clean"]["intervals"]) == {*MEAN_METRICS, *ERROR_METRICS} - {"rms_calibration_error"}
        assert "bootstrap_note" not in data["conventions"]


QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "-q")


def test_dash_means_standard_output_with_the_table_on_stderr(tmp_path, onnx_model, npz_data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("evaluate", onnx_model, "--data", npz_data, *QUICK[:-1], "-o", "-")  # -q: the verdict alone
    assert result.exit_code == 0, result.output
    assert _strict_json(result.stdout)["data"]["n"] == 60  # stdout holds the JSON document alone
    assert "Calibration audit" in result.stderr and "json report written to standard output" in result.stderr
    assert not (tmp_path / "-").exists()


def test_the_output_format_follows_the_extension_or_format_and_is_said(tmp_path, onnx_model, npz_data):
    html = run("evaluate", onnx_model, "--data", npz_data, *QUICK[:-1], "-o", tmp_path / "report.html")
    assert html.exit_code == 0, html.output
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert "html report written to " in html.stderr
    md = run("evaluate", onnx_model, "--data", npz_data, *QUICK[:-1], "-o", tmp_path / "audit.txt", "--format", "md")
    assert md.exit_code == 0, md.output
    assert (tmp_path / "audit.txt").read_text().startswith("#") and "md report written to " in md.stderr
    default = run("evaluate", onnx_model, "--data", npz_data, *QUICK[:-1], "-o", tmp_path / "report.out")
    saved = _strict_json((tmp_path / "report.out").read_text())
    assert saved["data"]["n"] == 60  # no known extension: JSON
    assert sum(row["n"] for row in saved["clean"]["per_class"]) == 60  # each class's own images
    assert sum(row["n_coverage"] for row in saved["clean"]["per_class"]) == saved["conformal"]["n_eval"]
    assert "json report written to " in default.stderr


def test_a_tiny_set_says_which_estimates_it_is_too_small_for(tmp_path, onnx_model, npz_data):
    result = run("evaluate", onnx_model, "--data", npz_data, *QUICK[:-1], "--limit", "25", "-o", tmp_path / "r.json")
    assert result.exit_code == 0, result.output  # a calibration split of 5 images
    notes = json.loads((tmp_path / "r.json").read_text())["conventions"]["small_sample"]
    assert [note.split(" ", 1)[0] for note in notes] == ["temperature", "debiased"]
    summary = result.stdout[: result.stdout.index("Clean calibration")]
    assert "note: temperature T = " in summary and "note: debiased L2 ECE on 25 images" in summary
    assert "temperature scaling (T =" not in summary  # no fix offered from a T fitted on 3 images


def test_outputs_write_through_symlinks_and_stream_to_devices(tmp_path, onnx_model, npz_data):
    real = tmp_path / "reports" / "r.json"
    real.parent.mkdir()
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    result = run("evaluate", onnx_model, "--data", npz_data, *QUICK, "-o", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and _strict_json(real.read_text())["data"]["n"] == 60
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        device = Path("/dev/null")
    inode = os.lstat(device).st_ino
    preds = tmp_path / "p.npz"
    result = run("evaluate", onnx_model, "--data", npz_data, *QUICK, "-o", device, "--save-predictions", preds)
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.lstat(device).st_mode) and os.lstat(device).st_ino == inode
