"""Input sensitivity: autograd and finite differences agree."""

import json

import numpy as np
import pytest
import torch
from conftest import tiny_images


def test_sensitivity_autograd_and_finite_difference_agree(tmp_path):
    """A torch model and its ONNX export: the two L^ estimates agree within the stated error."""
    import timm

    from macs_audit.metrics.sensitivity import sensitivity
    from macs_audit.models import architectures  # noqa: F401
    from macs_audit.models.export import export_onnx, save_safetensors
    from macs_audit.models.predictor import load_predictor

    torch.manual_seed(0)
    model = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
    meta = {
        "arch": "macs_resnet9_c10",
        "num_classes": 10,
        "input_size": [32, 32],
        "output": "logits",
        "mean": [0.5, 0.5, 0.5],
        "std": [0.25, 0.25, 0.25],
    }
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


class LinearTwoClass:
    """A torch-backend stand-in for a predictor: z = W x + b on flattened [0,1] images, two classes.

    Its margin is gamma_i = s_i (w_1 - w_0) . x_i + s_i (b_1 - b_0) with s_i = +1 for label 1 and -1
    for label 0, and its gradient norm is ||w_1 - w_0|| for every image: the flip radius of image i
    is gamma_i / ||w_1 - w_0|| in closed form."""

    backend = "torch"
    device = "cpu"

    def __init__(self, w: np.ndarray, b: np.ndarray):
        self.w, self.b = torch.from_numpy(w), torch.from_numpy(b)

    def forward(self, x, amp=None):
        return x.flatten(1) @ self.w.T + self.b

    def predict(self, images):
        return self.forward(torch.from_numpy(images)).numpy()


def two_class_case(n_correct: int, n_wrong: int):
    rng = np.random.default_rng(0)
    d = 3 * 4 * 4
    w = rng.normal(size=(2, d)).astype(np.float32)
    b = np.array([0.2, -0.1], dtype=np.float32)
    images = rng.random((n_correct + n_wrong, 3, 4, 4), dtype=np.float32)
    dw, db = (w[1] - w[0]).astype(np.float64), float(b[1] - b[0])
    score = images.reshape(len(images), -1).astype(np.float64) @ dw + db  # z_1 - z_0
    predicted = (score > 0).astype(np.int64)
    labels = predicted.copy()
    labels[n_correct:] = 1 - predicted[n_correct:]  # the last n_wrong images get the other label
    gamma = np.where(labels == 1, score, -score)
    return LinearTwoClass(w, b), images, labels, gamma, float(np.linalg.norm(dw))


def test_flip_radius_is_the_median_over_correctly_classified_images_only():
    """7 of 10 images misclassified: over all images the median radius would be negative; over the 3
    correct ones it is their median gamma / ||w_1 - w_0||."""
    from macs_audit.metrics.sensitivity import sensitivity

    predictor, images, labels, gamma, norm = two_class_case(n_correct=3, n_wrong=7)
    assert np.median(gamma / norm) < 0  # what the old statistic reported
    out = sensitivity(predictor, images, labels, batch_size=4)
    assert out["lipschitz"] == pytest.approx(norm, rel=1e-5)
    assert out["mean_margin_subset"] == pytest.approx(gamma.mean(), rel=1e-5, abs=1e-6)
    assert out["flip_radius_samples"] == 3
    assert out["median_flip_radius"] == pytest.approx(np.median(gamma[:3]) / norm, rel=1e-5)
    assert out["median_flip_radius"] > 0


def test_flip_radius_is_none_when_no_image_is_correctly_classified():
    from macs_audit.metrics.sensitivity import sensitivity

    predictor, images, labels, _, _ = two_class_case(n_correct=0, n_wrong=5)
    out = sensitivity(predictor, images, labels)
    assert out["flip_radius_samples"] == 0 and out["median_flip_radius"] is None
    assert out["lipschitz"] > 0


def test_robustness_ratio_takes_margin_and_sensitivity_over_the_same_images(tmp_path):
    """The audit's ratio is the sensitivity subset's mean margin over its L^, not the clean set's."""
    from conftest import linear_onnx

    from macs_audit.auditing import AuditOptions, run_audit
    from macs_audit.data.sources import array_source
    from macs_audit.data.splits import stratified_subset
    from macs_audit.metrics.margins import logit_margin
    from macs_audit.models.predictor import load_predictor

    predictor = load_predictor(linear_onnx(tmp_path / "m.onnx", seed=1), device="cpu")
    x, y = tiny_images(60, seed=2)
    source = array_source("tiny", "npz", x, y, [str(i) for i in range(10)])
    report = run_audit(predictor, source, AuditOptions(bootstrap=0, sensitivity_samples=20)).report
    rob = report.robustness
    sens = rob.sensitivity
    assert sens.n == 20
    assert rob.robustness_ratio == pytest.approx(sens.mean_margin_subset / sens.mean_gradient_norm, rel=1e-12)
    assert sens.mean_margin_subset != pytest.approx(report.clean.metrics["mean_margin"])  # the two populations differ
    # The subset's margins give the number of correctly classified images the radius is taken over.
    pos = stratified_subset(y, 20, 0)
    subset_logits = predictor.predict(np.ascontiguousarray(x[pos].transpose(0, 3, 1, 2), dtype=np.float32) / 255)
    margins = logit_margin(subset_logits, y[pos])
    assert sens.mean_margin_subset == pytest.approx(margins.mean(), rel=1e-5)
    assert sens.flip_radius_samples == int((margins > 0).sum())
    assert "correctly classified" in report.conventions.flip_radius
    assert "sensitivity subset" in report.conventions.robustness_ratio
