"""A fitted calibrator written into a torch model: temperature, vector and matrix scaling fold into the
classifier's weights and bias, so the model keeps its architecture and state-dict keys. The others (and any
map on a TorchScript input, a model that outputs probabilities, or a bias-free head where the map has
intercepts) become a TorchScript wrapper: the model, then the map in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from macs_audit.errors import InputError
from macs_audit.models.calibration_map import (
    FOLDABLE_METHODS,
    LINEAR_METHODS,
    Calibrator,
    check_method,
    linear_map,
    min_probability,
    one_vs_rest_tables,
)
from macs_audit.scores import PROBABILITY_FLOOR


def _fold_into_classifier(model, example, edit: Callable[[Any], None], expected: Callable[[Any], Any], what: str):
    """A copy of `model` with `edit(head)` applied to each classifier head, checked on `example` inputs to
    give `expected(logits)`; raises InputError (with the ONNX route) when there is no linear head or the
    edit does not give the expected logits. Returns (model, where it was folded)."""
    import copy

    import torch

    was_training = model.training
    model.eval()
    scaled = copy.deepcopy(model).eval()
    heads = _classifiers(scaled)
    if not heads:
        raise InputError(
            f"cannot find a linear classifier to fold the {what} into; "
            "export the model to ONNX and calibrate that instead"
        )
    for h in heads:
        with torch.no_grad():
            edit(h)
    with torch.no_grad():
        want = expected(model(example).float())
        got = scaled(example).float()
    model.train(was_training)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5 * float(want.abs().max().clamp_min(1))):
        raise InputError(
            f"folding the {what} into the classifier does not give this model's calibrated logits "
            "(its head is not linear); export it to ONNX and calibrate that instead"
        )
    return scaled, ", ".join(n for n, m in scaled.named_modules() if m in heads)


def fold_temperature_torch(model, temperature: float, example):
    """Return a copy of `model` whose logits are divided by `temperature`, and where it was folded.

    Folded into the classifier (timm's `get_classifier()`: weight and bias divided by T), so the
    calibrated model is the same architecture and loads from safetensors with no special key.
    Checked on `example` inputs; if the head is not linear in its weights, raises InputError.
    """
    if not temperature > 0:
        raise InputError(f"the temperature must be positive, got {temperature}")

    def divide(h: Any) -> None:
        h.weight.div_(temperature)
        if h.bias is not None:
            h.bias.div_(temperature)

    scaled, heads = _fold_into_classifier(model, example, divide, lambda z: z / temperature, "temperature")
    return scaled, f"classifier weights / T ({heads})"


def fold_linear_torch(model, weights: np.ndarray, bias: np.ndarray, example):
    """Return a copy of `model` whose logits z become W z + b (`weights` W (K, K), or a per-class scale (K,)
    meaning z * W + b), and where it was folded: head weight W_h -> W W_h, bias b_h -> W b_h + b (timm's
    `get_classifier()`, Linear or Conv2d). A head without a bias takes only b = 0. Checked on `example`
    inputs like `fold_temperature_torch`."""
    import torch

    matrix = np.diag(weights) if weights.ndim == 1 else weights
    m, c = torch.from_numpy(matrix), torch.from_numpy(bias)

    def apply(h: Any) -> None:
        if h.bias is None and np.any(bias):
            raise InputError("the classifier has no bias to hold the calibration's intercepts")
        w = h.weight.detach().double()
        h.weight.copy_((m @ w.reshape(len(w), -1)).reshape(w.shape))
        if h.bias is not None:
            h.bias.copy_(m @ h.bias.detach().double() + c)

    def expected(z: Any) -> Any:
        return (z.double() @ m.T + c).float()

    scaled, heads = _fold_into_classifier(model, example, apply, expected, "calibration map")
    return scaled, f"classifier weights and bias ({heads})"


def _classifiers(model) -> list:
    """timm's get_classifier() (one head or a tuple of heads), else the last Linear layer."""
    import torch

    linear = (torch.nn.Linear, torch.nn.Conv2d)
    if hasattr(model, "get_classifier"):
        heads = model.get_classifier()
        heads = list(heads) if isinstance(heads, (tuple, list)) else [heads]
        return heads if all(isinstance(h, linear) for h in heads) else []
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1:]
    return last


def foldable(model, calibrator: Calibrator) -> bool:
    """Whether `calibrator` can fold into `model`'s classifier: a map of the logits, and a bias to hold its
    intercepts (a head without one would need a new state-dict key, which the architecture does not load)."""
    if calibrator.method not in FOLDABLE_METHODS:
        return False
    _, bias, _ = linear_map(calibrator)
    return not np.any(bias) or all(h.bias is not None for h in _classifiers(model))


def temperature_wrapper(model, temperature: float):
    """`model` followed by division by `temperature`, as a module that TorchScript can script."""
    import torch

    class TemperatureScaled(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module, t: float):
            super().__init__()
            self.inner = inner
            self.register_buffer("temperature", torch.tensor(float(t)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) / self.temperature

    return TemperatureScaled(model, temperature)


def calibration_wrapper(model, calibrator: Calibrator, probabilities: bool = False):
    """`model` followed by `calibrator`'s map, as a module that TorchScript can script.

    It outputs float32 log-probabilities: the logits as the predictor reads them (float32; for a model that
    outputs probabilities, `probabilities=True`, their log with the predictor's clip), then the map in
    float64 as the calibrator's `transform` computes it, on the tables the ONNX graph uses."""
    import torch

    check_method(calibrator)
    if calibrator.method in LINEAR_METHODS:
        weights, bias, on_log_probabilities = linear_map(calibrator)
        kind = "log-affine" if on_log_probabilities else "affine"
        tables, floor = (weights, bias), 0.0
    else:
        x, v, interpolate = one_vs_rest_tables(calibrator)
        kind = "interpolate" if interpolate else "bins"
        tables, floor = (x, v), min_probability(calibrator)

    class Calibrated(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner
            self.kind = kind  # affine | log-affine | interpolate | bins
            self.probabilities = probabilities
            self.floor = floor
            self.clip = PROBABILITY_FLOOR  # TorchScript reads a float from an attribute, not a global
            # Fixed parameters rather than buffers: typed as tensors, and moved with the model all the same.
            self.a = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(tables[0])), requires_grad=False)
            self.b = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(tables[1])), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.inner(x).float()
            if self.probabilities:
                z = torch.log(z.double().clamp_min(self.clip)).float()
            z = z.double()
            if self.kind == "affine" or self.kind == "log-affine":
                if self.kind == "log-affine":
                    z = torch.log_softmax(z, 1)
                z = z * self.a if self.a.dim() == 1 else z @ self.a.T
                return torch.log_softmax(z + self.b, 1).float()
            p = torch.softmax(z, 1).T.contiguous()  # (K, N): each class against its own table row
            if self.kind == "interpolate":
                j = torch.searchsorted(self.a, p, right=True) - 1  # the last point <= p
                x0, x1 = self.a.gather(1, j), self.a.gather(1, j + 1)
                v0, v1 = self.b.gather(1, j), self.b.gather(1, j + 1)
                f = (v1 - v0) / (x1 - x0) * (p - x0) + v0
            else:
                f = self.b.gather(1, torch.searchsorted(self.a, p))  # the number of inner edges below p
            q = f.T.clamp_min(self.floor)
            q = q / q.sum(1, keepdim=True)
            return torch.log(q.clamp_min(self.clip)).float()

    return Calibrated(model)


def wrapper_description(calibrator: Calibrator) -> str:
    if calibrator.method in LINEAR_METHODS:
        return f"TorchScript wrapper (the model, then {calibrator.method} scaling of its logits)"
    return f"TorchScript wrapper (the model, then {calibrator.method} calibration of its softmax)"
