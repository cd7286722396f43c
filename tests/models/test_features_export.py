"""`macs-audit export` (models/export.py) writes the penultimate features as a second ONNX output, `features`,
which enable_features reads as it is; a model whose final linear layer is not found is exported without it, and
says so."""

import numpy as np
import onnx
import pytest
import torch

from macs_audit.models.export import CheckpointReading, export_checkpoint
from macs_audit.models.features import FEATURES_OUTPUT, enable_features
from macs_audit.models.predictor import load_predictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FLAGS = {"input_size": [16, 16], "mean": [0.5] * 3, "std": [0.25] * 3}


def tiny_net(head: torch.nn.Module) -> torch.nn.Sequential:
    torch.manual_seed(0)
    body = [torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
    return torch.nn.Sequential(*body, head).eval()


def export(tmp_path, net, name):
    torch.save(net, tmp_path / f"{name}.pt")  # a pickled module of torch's own classes
    warnings: list[str] = []
    path = export_checkpoint(
        tmp_path / f"{name}.pt", CheckpointReading(FLAGS, trust_pickled=True), on_warning=warnings.append
    )
    return path, warnings


def test_the_exported_file_carries_the_features_that_evaluate_reads(tmp_path):
    net = tiny_net(torch.nn.Linear(8, 3))
    path, warnings = export(tmp_path, net, "net")
    assert [o.name for o in onnx.load(str(path)).graph.output] == ["logits", FEATURES_OUTPUT]
    assert not any(FEATURES_OUTPUT in w for w in warnings)
    predictor = load_predictor(path, device="cpu")
    session = predictor.session
    head = enable_features(predictor)
    assert predictor.session is session and head.layer == FEATURES_OUTPUT  # read as it is: no surgery
    x = np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)
    logits, features = predictor.predict_with_features(x)
    with torch.no_grad():
        expected = net[:-1]((torch.from_numpy(x) - 0.5) / 0.25).numpy()  # the Linear's input
    np.testing.assert_allclose(features, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_allclose(head.weight, net[-1].weight.detach().double().numpy(), rtol=1e-6)
    np.testing.assert_allclose(head.bias, net[-1].bias.detach().double().numpy(), rtol=1e-6)
    np.testing.assert_allclose(head.logits(features), logits, rtol=0, atol=1e-5 * max(1, np.abs(logits).max()))


def test_a_model_without_a_linear_classifier_is_exported_without_features_and_says_so(tmp_path):
    net = tiny_net(torch.nn.Identity())  # the pooled conv output are the logits
    path, warnings = export(tmp_path, net, "conv")
    assert [o.name for o in onnx.load(str(path)).graph.output] == ["logits"]
    assert any(f"no {FEATURES_OUTPUT} output" in w and "--feature-layer NAME" in w for w in warnings), warnings
