"""`macs-audit evaluate` through typer's CliRunner: happy paths and every bad input."""

import json

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app

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
    assert data["schema_version"] == "1.0"
    assert data["model"]["provider"] == "CPUExecutionProvider" and data["model"]["format"] == "onnx"
    assert data["data"]["n"] == 60 and data["conventions"]["ece_bins"] == 15
    assert set(data["clean"]["intervals"]) == {"accuracy", "ece", "nll"}
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


def one_line_error(result, code):
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def bad_npz(tmp_path, x, y):
    path = tmp_path / "bad.npz"
    np.savez(path, x=x, y=y)
    return path


@pytest.mark.parametrize(
    "case",
    [
        "missing model",
        "corrupt onnx",
        "class count",
        "wrong input size",
        "nan logits",
        "pickled module",
        "empty data",
        "label out of range",
        "missing data",
        "state dict without arch",
    ],
)
def test_bad_inputs_give_one_line_error_and_no_output(tmp_path, npz_data, case):
    out = tmp_path / "report.json"
    preds = tmp_path / "preds.npz"
    model, data, extra, code = linear_onnx(tmp_path / "ok.onnx"), npz_data, [], 3
    if case == "missing model":
        model = tmp_path / "nope.onnx"
    elif case == "corrupt onnx":
        model = tmp_path / "corrupt.onnx"
        model.write_bytes(b"\x08\x07garbage" * 10)
    elif case == "class count":
        model = linear_onnx(tmp_path / "k5.onnx", num_classes=5)
    elif case == "wrong input size":
        model = linear_onnx(tmp_path / "fixed.onnx", size=32)
        extra = ["--input-size", "64"]
    elif case == "nan logits":
        model = linear_onnx(tmp_path / "nan.onnx", nan=True)
    elif case == "pickled module":
        import torch

        model = tmp_path / "module.pt"
        torch.save(torch.nn.Linear(3, 10), model)
    elif case == "empty data":
        data = bad_npz(tmp_path, np.zeros((0, 32, 32, 3), np.uint8), np.zeros(0, np.int64))
    elif case == "label out of range":
        x, y = tiny_images(10)
        y[3] = 10
        data = bad_npz(tmp_path, x, y)
        # The data declares no class names, so 11 classes are inferred: the model's 10 do not match.
    elif case == "missing data":
        data = tmp_path / "missing.npz"
    elif case == "state dict without arch":
        import torch

        model = tmp_path / "sd.pt"
        torch.save(torch.nn.Linear(3, 10).state_dict(), model)
        code = 2
    result = run("evaluate", model, "--data", data, "-o", out, "--save-predictions", preds, *extra)
    line = one_line_error(result, code)
    assert not out.exists() and not preds.exists()
    assert not list(tmp_path.glob(".*.tmp"))
    if case == "pickled module":
        assert "--trust-pickled-model-code" in line


def test_pickled_module_loads_with_the_flag(tmp_path, npz_data):
    import torch

    module = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 10))
    torch.save(module, tmp_path / "module.pt")
    result = run(
        "evaluate", tmp_path / "module.pt", "--data", npz_data, "--trust-pickled-model-code", "--bootstrap", "0"
    )
    assert result.exit_code == 0, result.output


def test_usage_errors_exit_2(tmp_path, onnx_model):
    assert run("evaluate", onnx_model, "--device", "tpu").exit_code == 2
    assert run("evaluate", onnx_model, "--calibration-split", "1.5").exit_code == 2
    assert run("evaluate", onnx_model, "--batch-size", "0").exit_code == 2
    assert run("evaluate").exit_code == 2
