"""`macs-audit calibrate` on a model with planted overconfidence (the folding itself is tested in
tests/models/test_calibrated_onnx.py and test_calibrated_torch.py)."""

import json

import numpy as np
import onnx
import pytest
import timm
import torch
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.calibrators.temperature import temperature_nll
from macs_audit.cli import app
from macs_audit.metrics.accumulators import calibration_metrics
from macs_audit.models import architectures  # noqa: F401
from macs_audit.models.export import save_safetensors, write_sidecar
from macs_audit.models.predictor import load_predictor

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def overconfident_onnx(path, scale=60.0):
    """A linear ONNX classifier that learned the colour -> label rule, with its logits blown up by `scale`."""
    from onnx import numpy_helper

    x, y = tiny_images(400, seed=5)
    feats = np.c_[x.mean(axis=(1, 2)) / 255.0, np.ones(len(x))]
    # Least squares on one-hot targets: a weak but real classifier, then planted overconfidence.
    w, *_ = np.linalg.lstsq(feats, np.eye(10)[y], rcond=None)
    linear_onnx(path)
    model = onnx.load(str(path))
    for init in model.graph.initializer:
        if init.name == "w":
            init.CopyFrom(numpy_helper.from_array((w[:3] * scale).astype(np.float32), "w"))
        if init.name == "b":
            init.CopyFrom(numpy_helper.from_array((w[3] * scale).astype(np.float32), "b"))
    model.metadata_props.add(key="macs_audit.mean", value="[0, 0, 0]")
    model.metadata_props.add(key="macs_audit.std", value="[1, 1, 1]")
    onnx.save(model, str(path))
    return path


def heldout_nll(model_path, x, y):
    logits = load_predictor(model_path, device="cpu").predict(x.transpose(0, 3, 1, 2).astype(np.float32) / 255)
    return calibration_metrics(logits, y, 10)["nll"]


def _calibrate(model, tmp_path, out, *extra: str):
    """`calibrate MODEL` fitted on tmp_path/val.npz, audited on tmp_path/test.npz, on the CPU, quiet."""
    data = ["--data", str(tmp_path / "val.npz"), "--eval-data", str(tmp_path / "test.npz")]
    quick = ["--out", str(out), "--device", "cpu", "--bootstrap", "0", *extra, "--quiet"]
    return runner.invoke(app, ["calibrate", str(model), *data, *quick])


def test_calibrate_cli_lowers_heldout_nll_onnx(tmp_path):
    model = overconfident_onnx(tmp_path / "model.onnx")
    for name, seed in (("val", 1), ("test", 2)):
        x, y = tiny_images(200, seed=seed)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    out = tmp_path / "cal"
    result = _calibrate(model, tmp_path, out)
    assert result.exit_code == 0, result.output
    t = json.loads((out / "calibration.json").read_text())
    assert t["method"] == "temperature" and t["fit_data"]["n"] == 200 and t["fit_data"]["n_fitted_on"] == 200
    # One method too is chosen on a held-out 30% against the uncalibrated model, then fitted on all 200.
    selection = t["selection"]
    assert selection["selected"] == "temperature" and selection["n_fit"] + selection["n_eval"] == 200
    t["temperature"] = t["parameters"]["temperature"]
    assert t["temperature"] > 2 and t["fit_nll_after"] < t["fit_nll_before"]
    x, y = tiny_images(200, seed=3)  # data neither the fit nor the audit saw
    assert heldout_nll(out / "model_calibrated.onnx", x, y) < heldout_nll(model, x, y)
    assert t["calibrated_model"] == "model_calibrated.onnx"  # named by what it is, not as the input
    before = json.loads((out / "audit_before.json").read_text())["clean"]["metrics"]
    after = json.loads((out / "audit_after.json").read_text())["clean"]["metrics"]
    assert after["nll"] < before["nll"] and after["accuracy"] == before["accuracy"]
    assert f"temperature scaling (T = {t['temperature']:.4f}) of model.onnx" in result.output
    assert "A = before, B = after" in result.output and "| clean |" in (out / "audit_comparison.md").read_text()


def test_calibrate_cli_torch_checkpoint(tmp_path):
    torch.manual_seed(0)
    net = timm.create_model("macs_resnet9_c10", num_classes=10)
    with torch.no_grad():
        net.fc.weight.mul_(200.0)  # planted overconfidence
    save_safetensors(net, tmp_path / "net.safetensors")
    write_sidecar(tmp_path / "net.json", {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [16, 16]})
    for name, seed in (("val", 1), ("test", 2)):
        x, y = tiny_images(100, seed=seed, size=16)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    out = tmp_path / "cal"
    result = _calibrate(tmp_path / "net.safetensors", tmp_path, out, "--calibration-split", "0")
    assert result.exit_code == 0, result.output
    sidecar = json.loads((out / "net_calibrated.json").read_text())
    t = sidecar["calibration"]["temperature"]
    assert t > 1 and sidecar["arch"] == "macs_resnet9_c10"
    x, y = tiny_images(100, seed=3, size=16)
    assert heldout_nll(out / "net_calibrated.safetensors", x, y) < heldout_nll(tmp_path / "net.safetensors", x, y)
    # The saved weights are the original ones with the head divided by T: nothing else changed.
    from safetensors.torch import load_file

    a, b = load_file(str(tmp_path / "net.safetensors")), load_file(str(out / "net_calibrated.safetensors"))
    torch.testing.assert_close(b["fc.weight"], a["fc.weight"] / t)
    assert all(torch.equal(a[k], b[k]) for k in a if k != "fc.weight")
    for audit in ("audit_before.json", "audit_after.json"):  # fp32 unless --precision says otherwise
        assert json.loads((out / audit).read_text())["model"]["precision"] == "fp32"
    # --precision bf16 / fp16 is CUDA autocast: refused on a CPU before anything is fitted or written.
    for precision in ("bf16", "fp16"):
        refused = tmp_path / f"cal_{precision}"
        result = _calibrate(tmp_path / "net.safetensors", tmp_path, refused, "--precision", precision)
        assert result.exit_code == 2, result.output
        assert f"--precision {precision} runs torch models under CUDA autocast" in result.output
        assert not refused.exists()


def test_temperature_nll_is_minimised_at_the_fit():
    from macs_audit.calibrators.temperature import optimal_temperature

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 5)) * 6
    labels = np.where(rng.random(300) < 0.6, logits.argmax(1), rng.integers(0, 5, 300))
    t = optimal_temperature(logits, labels)
    assert temperature_nll(logits, labels, t) <= min(temperature_nll(logits, labels, t * f) for f in (0.9, 1.1))


def test_calibrate_refuses_existing_outputs_without_force_and_never_its_input(tmp_path):
    model = overconfident_onnx(tmp_path / "model.onnx")
    x, y = tiny_images(100, seed=1)
    np.savez(tmp_path / "val.npz", x=x, y=y)
    common = ["calibrate", str(model), "--data", str(tmp_path / "val.npz"), "--eval-data", str(tmp_path / "val.npz")]
    quick = ["--device", "cpu", "--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "-q"]
    out = tmp_path / "cal"
    assert runner.invoke(app, [*common, "--out", str(out), *quick]).exit_code == 0
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    result = runner.invoke(app, [*common, "--out", str(out), *quick])
    assert result.exit_code == 2 and "pass --force" in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written
    result = runner.invoke(app, [*common, "--out", str(out), *quick, "--force"])
    assert result.exit_code == 0, result.output
    # The model's own folder: the calibrated model is written beside the input, never over it.
    original = model.read_bytes()
    result = runner.invoke(app, [*common, "--out", str(tmp_path), *quick])
    assert result.exit_code == 0, result.output
    assert model.read_bytes() == original and (tmp_path / "model_calibrated.onnx").is_file()
