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
