"""What the tests of the calibrated-model writers share: fitting a calibrator on a tiny model's logits, and the
check that a calibrated model gives the calibrator's probabilities."""

import numpy as np
import torch
from conftest import tiny_images

from macs_audit.calibrators.base import fit_calibrator
from macs_audit.calibrators.common import softmax
from macs_audit.models.export import write_sidecar

K = 10
FIT_DATA = {"source": "fit.npz", "n": 400}
TOLERANCE = 1e-6  # absolute, on probabilities


def images(n: int, seed: int, size: int = 8) -> np.ndarray:
    x, _ = tiny_images(n, seed=seed, size=size)
    return x.transpose(0, 3, 1, 2).astype(np.float32) / 255.0


def fit_on(predictor, method: str, size: int = 8):
    """(`method` fitted on the predictor's logits of 400 images, 120 other images to check on). The labels are
    drawn from softmax(logits / 2) (Gumbel-max): the model is overconfident, and every map has something to fit."""
    logits = predictor.predict(images(400, seed=1, size=size)).astype(np.float64)
    gumbel = -np.log(-np.log(np.random.default_rng(0).random(logits.shape)))
    labels = np.argmax(logits / 2 + gumbel, axis=1)
    k = logits.shape[1]
    labels[: 10 * k] = np.arange(10 * k) % k  # every class at least 10 times: the per-class maps' fit minimum
    return fit_calibrator(method, logits, labels), images(120, seed=2, size=size)


def assert_same_probabilities(calibrated_logits, calibrator, original_logits, log_probabilities=None) -> None:
    """softmax(calibrated logits) == softmax(calibrator.transform(original logits)), and the calibrated logits are
    log-probabilities where they should be: every map but temperature scaling and the ones folded into a head."""
    want = softmax(calibrator.transform(original_logits))
    got = softmax(np.asarray(calibrated_logits, dtype=np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)
    if log_probabilities is None:
        log_probabilities = calibrator.method != "temperature"
    if log_probabilities:
        np.testing.assert_allclose(np.exp(calibrated_logits.astype(np.float64)).sum(axis=1), 1.0, atol=TOLERANCE)
    # The check has teeth: the calibrated probabilities differ from the original ones.
    assert np.abs(want - softmax(original_logits.astype(np.float64))).max() > 1e-3


class TinyNet(torch.nn.Module):
    """Global average pooling and a linear layer: a torch model with no timm in it."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, K)
        rng = np.random.default_rng(0)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(rng.normal(0, 3, (K, 3))))
            self.fc.bias.copy_(torch.from_numpy(rng.normal(0, 0.1, K)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


class TinySoftmaxNet(TinyNet):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(x.mean(dim=(2, 3))), 1)


def scripted(folder, net: torch.nn.Module):
    torch.jit.save(torch.jit.script(net.eval()), str(folder / "tiny.pt"))
    write_sidecar(folder / "tiny.json", {"input_size": [8, 8], "num_classes": K, "mean": [0.5] * 3, "std": [0.25] * 3})
    return folder / "tiny.pt"
