"""Perturbation views, sensitivity (autograd vs finite differences), corruption summaries, the grid via the CLI."""

import json

import numpy as np
import pytest
import torch
from conftest import linear_onnx, tiny_images
from scipy.ndimage import gaussian_filter
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.cli.options import (
    parse_corruptions,
    parse_perturbations,
    parse_severities,
)
from macs_audit.errors import UsageError
from macs_audit.metrics.corruption_summary import summarize_corruptions
from macs_audit.report import ViewResult
from macs_audit.views import perturbation_params, perturbations
from macs_audit.views.view import perturbation

runner = CliRunner()


def test_blur_matches_scipy_gaussian_filter_per_sample_sigma():
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    sigmas = [0.3, 0.7, 1.0]
    y = perturbations.gaussian_blur(x, torch.tensor(sigmas))
    for i, s in enumerate(sigmas):
        ref = np.stack([gaussian_filter(x[i, c].double().numpy(), s, mode="nearest", truncate=4.0) for c in range(3)])
        assert np.abs(ref - y[i].numpy()).max() < 1e-5


def test_views_are_seeded_bounded_and_shaped():
    x = torch.rand(4, 3, 8, 8)
    for name in perturbation_params.EVAL_VIEWS:
        a = perturbations.evaluation_view(name, x, torch.Generator().manual_seed(1))
        b = perturbations.evaluation_view(name, x, torch.Generator().manual_seed(1))
        assert a.shape == x.shape and torch.equal(a, b) and a.min() >= 0 and a.max() <= 1
    noisy = perturbations.gaussian_noise(torch.full((2, 3, 64, 64), 0.5), 0.08, torch.Generator().manual_seed(0))
    assert abs(float((noisy - 0.5).std()) - 0.08) < 0.005
    t = perturbations.training_view(x, torch.Generator().manual_seed(2))
    assert t.shape == x.shape and not torch.equal(t, x)
    with pytest.raises(UsageError):
        perturbations.evaluation_view("fog", x, torch.Generator())


def test_perturbation_view_does_not_depend_on_batch_split():
    images, _ = tiny_images(8)
    view = perturbation("noise+blur", seed=0, device="cpu")
    whole = view(images, 0)
    assert np.array_equal(whole, view(images, 0))
    assert not np.array_equal(whole, perturbation("noise+blur", seed=1, device="cpu")(images, 0))


def test_parsers():
    assert parse_severities("1-5") == (1, 2, 3, 4, 5)
    assert parse_severities("3, 1") == (1, 3)
    assert len(parse_corruptions("cifar-c")) == 19 and len(parse_corruptions("benchmark")) == 15
    assert parse_perturbations("none") == () and len(parse_perturbations("all")) == 3
    for bad in (lambda: parse_severities("0-6"), lambda: parse_severities("x"),
                lambda: parse_corruptions("rain"), lambda: parse_perturbations("fog")):
        with pytest.raises(UsageError):
            bad()


def test_sensitivity_autograd_and_finite_difference_agree(tmp_path):
    """A torch model and its ONNX export: the two L^ estimates agree within the stated error."""
    import timm

    from macs_audit.metrics.sensitivity import sensitivity
    from macs_audit.models import architectures  # noqa: F401
    from macs_audit.models.export import export_onnx, save_safetensors
    from macs_audit.models.predictor import load_predictor

    torch.manual_seed(0)
    model = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
    meta = {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [32, 32], "output": "logits",
            "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
    save_safetensors(model, tmp_path / "m.safetensors")
    (tmp_path / "m.json").write_text(json.dumps(meta))
    export_onnx(model, tmp_path / "m.onnx", meta)
    images, labels = tiny_images(48, seed=3)
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32) / 255
    exact = sensitivity(load_predictor(tmp_path / "m.safetensors", device="cpu"), x, labels)
    estimate = sensitivity(load_predictor(tmp_path / "m.onnx", device="cpu"), x, labels, directions=16)
    assert exact["method"] == "autograd" and estimate["method"].startswith("finite-difference")
    assert exact["lipschitz"] > 0
    assert abs(estimate["lipschitz"] - exact["lipschitz"]) <= estimate["lipschitz_error"]
    assert estimate["lipschitz_error"] < 0.25 * exact["lipschitz"]  # the error bar is informative
    assert exact["mean_margin_subset"] == pytest.approx(estimate["mean_margin_subset"], abs=1e-4)


def corruption_views(acc_by_key):
    from macs_audit.views.corruptions.table import FAMILIES

    return [ViewResult(name=f"{c}@{s}", kind="corruption", metrics={"accuracy": a, "ece": 0.1, "nll": 1.0, "brier": 0.5},
                       corruption=c, severity=s, family=FAMILIES[c]) for (c, s), a in acc_by_key.items()]


def test_corruption_summary_means_and_mce():
    from macs_audit.report import Conventions, DataInfo, ModelInfo, Report, Runtime
    from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, CORRUPTIONS

    acc = {(c, s): 0.9 - 0.1 * s + 0.01 * i for i, c in enumerate(CORRUPTIONS) for s in (1, 2, 3, 4, 5)}
    summary = summarize_corruptions(corruption_views(acc), clean_accuracy=0.95)
    mean15 = np.mean([acc[c, s] for c in BENCHMARK_CORRUPTIONS for s in range(1, 6)])
    assert summary["mean_accuracy_15"] == pytest.approx(mean15)
    assert summary["mean_accuracy_19"] == pytest.approx(np.mean(list(acc.values())))
    assert summary["mce_unnormalized"] == pytest.approx(1 - mean15)
    assert summary["corruptions"]["speckle_noise"]["extra"] and summary["families"]["weather"]["corruptions"][0] == "snow"
    # A baseline with twice our error everywhere: CE = 0.5 for every corruption.
    base_acc = {k: 1 - 2 * (1 - a) for k, a in acc.items()}
    baseline = Report(model=ModelInfo(), data=DataInfo(), runtime=Runtime(), conventions=Conventions(), seeds={},
                      clean=ViewResult("clean", "clean", {"accuracy": 0.9}), views=corruption_views(base_acc))
    summary = summarize_corruptions(corruption_views(acc), 0.95, baseline)
    assert summary["mce"] == pytest.approx(0.5)
    c = "gaussian_noise"
    rel = sum((1 - acc[c, s]) - 0.05 for s in range(1, 6)) / sum((1 - base_acc[c, s]) - 0.1 for s in range(1, 6))
    assert summary["relative_ce"][c] == pytest.approx(rel)


def test_partial_grid_has_no_benchmark_means():
    summary = summarize_corruptions(corruption_views({("fog", 1): 0.5, ("fog", 2): 0.3}), 0.9)
    assert "mean_accuracy_15" not in summary and summary["mean_accuracy_selected"] == pytest.approx(0.4)


def test_corruption_grid_end_to_end_through_the_cli(tmp_path):
    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(40)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["evaluate", str(model), "--data", str(tmp_path / "d.npz"), "-o", str(out),
                                 "--corruptions", "gaussian_noise,brightness,glass_blur", "--severities", "1,5",
                                 "--perturbations", "all", "--sensitivity-samples", "20", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    cells = [v for v in report["views"] if v["kind"] == "corruption"]
    assert [(v["corruption"], v["severity"]) for v in cells] == [
        ("gaussian_noise", 1), ("gaussian_noise", 5), ("brightness", 1), ("brightness", 5), ("glass_blur", 1), ("glass_blur", 5)]
    assert all(v["metrics"]["n"] == 40 for v in cells)
    summary = report["corruption_summary"]
    assert set(summary["corruptions"]) == {"gaussian_noise", "brightness", "glass_blur"}
    assert summary["families"]["noise"]["accuracy"] == pytest.approx(summary["corruptions"]["gaussian_noise"]["accuracy"])
    rob = report["robustness"]
    assert rob["robust_view"] == "noise+blur" and 0 <= rob["robust_accuracy"] <= 1
    assert rob["sensitivity"]["n"] == 20 and rob["robustness_ratio"] is not None
    assert "CIFAR-C accuracy" in result.stdout
    # The same seed gives the same grid.
    again = tmp_path / "r2.json"
    runner.invoke(app, ["evaluate", str(model), "--data", str(tmp_path / "d.npz"), "-o", str(again),
                        "--corruptions", "gaussian_noise,brightness,glass_blur", "--severities", "1,5",
                        "--perturbations", "all", "--sensitivity-samples", "20", "--bootstrap", "0"])
    assert json.loads(again.read_text())["views"] == report["views"]
