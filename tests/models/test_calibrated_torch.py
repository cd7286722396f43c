"""models/calibrated_torch.py: calibration maps folded into a torch classifier, or scripted around the model."""

import json

import numpy as np
import pytest
import torch
from calibration_helpers import K, TinyNet, assert_same_probabilities, fit_on, images

from macs_audit.calibrators.base import METHODS
from macs_audit.errors import InputError
from macs_audit.models.calibrated import write_calibrated
from macs_audit.models.calibrated_torch import (
    calibration_wrapper,
    fold_linear_torch,
    fold_temperature_torch,
    foldable,
    temperature_wrapper,
)
from macs_audit.models.export import save_safetensors, write_sidecar
from macs_audit.models.predictor import load_predictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class NumpyLogits:
    """TinyNet's logits as a predictor would give them (float32 numpy), for fit_on."""

    def __init__(self, net: torch.nn.Module):
        self.net = net

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net(torch.from_numpy(x)).numpy()


def test_temperature_folds_into_the_head_of_a_copy():
    net = TinyNet().eval()
    x = torch.from_numpy(images(6, seed=0))
    scaled, where = fold_temperature_torch(net, 2.0, x)
    assert where == "classifier weights / T (fc)"
    with torch.no_grad():
        torch.testing.assert_close(scaled(x), net(x) / 2.0)
    assert scaled is not net and not torch.equal(scaled.fc.weight, net.fc.weight)  # the input is left as it was
    with pytest.raises(InputError, match="must be positive"):
        fold_temperature_torch(net, -1.0, x)


def test_temperature_folds_into_a_bias_free_head_with_the_same_keys():
    """The project's ResNet-9 (timm's get_classifier(), no bias): the state dict keeps its keys; a head that is
    not linear in its weights is refused with the ONNX route."""
    import timm

    from macs_audit.models import architectures  # noqa: F401  (registers macs_resnet9_c10)

    model = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
    x = torch.randn(3, 3, 16, 16)
    scaled, where = fold_temperature_torch(model, 3.0, x)
    with torch.no_grad():
        torch.testing.assert_close(scaled(x), model(x) / 3.0, rtol=1e-5, atol=1e-6)
    assert "classifier" in where and set(scaled.state_dict()) == set(model.state_dict())

    class SoftmaxHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def get_classifier(self):
            return self.fc

        def forward(self, x):
            return torch.softmax(self.fc(x), 1)

    with pytest.raises(InputError, match="ONNX"):
        fold_temperature_torch(SoftmaxHead(), 2.0, torch.randn(2, 4))


def test_a_linear_map_folds_into_weight_and_bias():
    net = TinyNet().eval()
    x = torch.from_numpy(images(6, seed=0))
    rng = np.random.default_rng(0)
    weights, bias = rng.normal(size=(K, K)), rng.normal(size=K)
    scaled, where = fold_linear_torch(net, weights, bias, x)
    assert where == "classifier weights and bias (fc)"
    with torch.no_grad():
        want = (net(x).double() @ torch.from_numpy(weights).T + torch.from_numpy(bias)).float()
        torch.testing.assert_close(scaled(x), want, rtol=1e-5, atol=1e-5)


def test_a_head_that_is_not_linear_is_refused_with_the_onnx_route():
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, K), torch.nn.Tanh()).eval()
    with pytest.raises(InputError, match="not linear.*ONNX"):
        fold_temperature_torch(net, 3.0, torch.from_numpy(images(4, seed=0)))


@pytest.mark.parametrize("method", METHODS)
def test_the_scripted_wrapper_gives_the_calibrators_probabilities(method):
    net = TinyNet().eval()
    calibrator, x = fit_on(NumpyLogits(net), method)
    wrapped = torch.jit.script(calibration_wrapper(net, calibrator))
    with torch.no_grad():
        calibrated = wrapped(torch.from_numpy(x)).numpy()
        original = net(torch.from_numpy(x)).numpy()
    assert calibrated.dtype == np.float32
    assert_same_probabilities(calibrated, calibrator, original)


def test_the_temperature_wrapper_divides():
    net = TinyNet().eval()
    x = torch.from_numpy(images(4, seed=0))
    wrapped = torch.jit.script(temperature_wrapper(net, 4.0))
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), net(x) / 4.0)


def test_which_maps_fold():
    net = TinyNet().eval()
    fitted = {method: fit_on(NumpyLogits(net), method)[0] for method in ("temperature", "vector", "dirichlet")}
    assert foldable(net, fitted["temperature"]) and foldable(net, fitted["vector"])
    assert not foldable(net, fitted["dirichlet"])  # a map of the log-probabilities, not of the logits
    net.fc.bias = None  # no bias to hold vector scaling's intercepts
    assert foldable(net, fitted["temperature"]) and not foldable(net, fitted["vector"])


def test_a_head_without_bias_takes_intercepts_only_through_a_wrapper(tmp_path):
    """The project's ResNet-9 has a bias-free head: vector scaling's intercepts cannot fold into it, so the
    calibrated model is a TorchScript wrapper; folding directly says why."""
    import timm

    from macs_audit.models import architectures  # noqa: F401  (registers macs_resnet9_c10)

    torch.manual_seed(0)
    net = timm.create_model("macs_resnet9_c10", num_classes=K).eval()
    with torch.no_grad():
        net.fc.weight.mul_(20.0)  # logits spread enough to calibrate
    save_safetensors(net, tmp_path / "net.safetensors")
    write_sidecar(tmp_path / "net.json", {"arch": "macs_resnet9_c10", "num_classes": K, "input_size": [16, 16]})
    predictor = load_predictor(tmp_path / "net.safetensors", device="cpu")
    calibrator, x = fit_on(predictor, "vector", size=16)
    out = tmp_path / "out"
    out.mkdir()
    path = write_calibrated(tmp_path / "net.safetensors", predictor, calibrator, out)
    assert path == out / "net.pt"
    assert "TorchScript wrapper" in json.loads((out / "net.json").read_text())["calibration"]["folded_into"]
    assert_same_probabilities(load_predictor(path, device="cpu").predict(x), calibrator, predictor.predict(x))
    with pytest.raises(InputError, match="no bias"):
        fold_linear_torch(net, calibrator.scale, calibrator.bias, torch.randn(2, 3, 16, 16))
