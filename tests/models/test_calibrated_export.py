"""Every post-hoc calibrator written into the model: the ONNX graph and the torch file give the calibrator's own
probabilities (softmax of its transform of the original logits) to 1e-6, and record the method and fit data."""

import json

import numpy as np
import onnx
import pytest
import torch
from conftest import linear_onnx, tiny_images

from macs_audit.calibrators.base import METHODS, fit_calibrator
from macs_audit.calibrators.common import softmax
from macs_audit.errors import InputError
from macs_audit.models.calibrated import (
    CALIBRATION_METADATA_KEY,
    TEMPERATURE_METADATA_KEY,
    fold_calibrator_onnx,
    fold_linear_torch,
    write_calibrated,
)
from macs_audit.models.export import save_safetensors, write_sidecar
from macs_audit.models.predictor import load_predictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")

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
    return fit_calibrator(method, logits, np.argmax(logits / 2 + gumbel, axis=1)), images(120, seed=2, size=size)


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


@pytest.mark.parametrize("method", METHODS)
def test_onnx_graph_gives_the_calibrators_probabilities(tmp_path, method):
    import onnxruntime as ort

    src = linear_onnx(tmp_path / "model.onnx", num_classes=K, size=8)
    predictor = load_predictor(src, device="cpu")
    calibrator, x = fit_on(predictor, method)
    out = tmp_path / "out"
    out.mkdir()
    path = write_calibrated(src, predictor, calibrator, out, fit_data=FIT_DATA)
    assert path == out / "model.onnx" and [p.name for p in out.iterdir()] == ["model.onnx"]  # one file
    # The file alone, in onnxruntime, on the same input as the original model.
    raw = ort.InferenceSession(str(src)).run(None, {"images": x})[0]
    calibrated = ort.InferenceSession(str(path)).run(None, {"images": x})[0]
    assert calibrated.dtype == np.float32
    assert_same_probabilities(calibrated, calibrator, raw)
    # End to end: `evaluate` reads it back with the same numbers.
    assert_same_probabilities(load_predictor(path, device="cpu").predict(x), calibrator, predictor.predict(x))
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    assert all(node.domain in ("", "ai.onnx") for node in proto.graph.node)  # standard operators only
    used = {name for node in proto.graph.node for name in node.input}
    assert all(init.name in used for init in proto.graph.initializer)
    props = {p.key: p.value for p in proto.metadata_props}
    record = json.loads(props[CALIBRATION_METADATA_KEY])
    assert record["method"] == method and record["fit_data"] == FIT_DATA
    assert (record["n_classes"], record["fit_size"]) == (K, 400)
    assert record["n_parameters"] == calibrator.n_parameters and record["from"] == "model.onnx"
    assert (TEMPERATURE_METADATA_KEY in props) == (method == "temperature")


@pytest.mark.parametrize("method", METHODS)
def test_onnx_model_that_outputs_probabilities(tmp_path, method):
    src = linear_onnx(tmp_path / "p.onnx", num_classes=K, size=8, softmax=True)
    predictor = load_predictor(src, device="cpu")
    calibrator, x = fit_on(predictor, method)
    assert predictor.output.kind == "probabilities"
    path = write_calibrated(src, predictor, calibrator, tmp_path, fit_data=FIT_DATA)
    calibrated = load_predictor(path, device="cpu")
    assert_same_probabilities(calibrated.predict(x), calibrator, predictor.predict(x))
    assert calibrated.config.output == "logits"


def test_onnx_tables_cover_probabilities_outside_the_fit_range(tmp_path):
    """Isotonic maps are constant beyond their first and last points and histogram bins reach 0 and 1: logits
    far larger than the fit data's (probabilities at 0 and 1) still give the calibrator's numbers."""
    import onnxruntime as ort

    src = linear_onnx(tmp_path / "model.onnx", num_classes=K, size=8)
    predictor = load_predictor(src, device="cpu")
    x = images(100, seed=3)
    bright = np.clip(x * 40.0 - 20.0, -50.0, 50.0).astype(np.float32)  # far outside [0, 1]: extreme logits
    raw = ort.InferenceSession(str(src)).run(None, {"images": bright})[0]
    assert softmax(raw.astype(np.float64)).max() > 1 - 1e-9
    for method in ("isotonic", "histogram"):
        calibrator, _ = fit_on(predictor, method)
        fold_calibrator_onnx(src, tmp_path / f"{method}.onnx", calibrator)
        calibrated = ort.InferenceSession(str(tmp_path / f"{method}.onnx")).run(None, {"images": bright})[0]
        np.testing.assert_allclose(
            softmax(calibrated.astype(np.float64)), softmax(calibrator.transform(raw)), rtol=0, atol=TOLERANCE
        )


@pytest.mark.parametrize("method", ["dirichlet", "isotonic", "histogram"])
def test_onnx_model_of_an_older_opset(tmp_path, method):
    """Opset 11, where ReduceSum takes its axes as an attribute: the appended graph follows the model's opset."""
    import onnxruntime as ort

    proto = onnx.load(str(linear_onnx(tmp_path / "model.onnx", num_classes=K, size=8)))
    proto.opset_import[0].version, proto.ir_version = 11, 6
    onnx.save(proto, str(tmp_path / "old.onnx"))
    predictor = load_predictor(tmp_path / "old.onnx", device="cpu")
    calibrator, x = fit_on(predictor, method)
    fold_calibrator_onnx(tmp_path / "old.onnx", tmp_path / "calibrated.onnx", calibrator)
    assert onnx.load(str(tmp_path / "calibrated.onnx")).opset_import[0].version == 11
    raw = ort.InferenceSession(str(tmp_path / "old.onnx")).run(None, {"images": x})[0]
    calibrated = ort.InferenceSession(str(tmp_path / "calibrated.onnx")).run(None, {"images": x})[0]
    assert_same_probabilities(calibrated, calibrator, raw)


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


@pytest.fixture(scope="module")
def torchscript_model(tmp_path_factory):
    return scripted(tmp_path_factory.mktemp("torchscript"), TinyNet())


@pytest.mark.parametrize("method", METHODS)
def test_torchscript_wrapper_gives_the_calibrators_probabilities(tmp_path, torchscript_model, method):
    predictor = load_predictor(torchscript_model, device="cpu")
    calibrator, x = fit_on(predictor, method)
    path = write_calibrated(torchscript_model, predictor, calibrator, tmp_path, fit_data=FIT_DATA)
    assert path == tmp_path / "tiny.pt"
    calibrated = load_predictor(path, device="cpu")
    assert calibrated.info["format"] == "torchscript"
    assert_same_probabilities(calibrated.predict(x), calibrator, predictor.predict(x))
    sidecar = json.loads((tmp_path / "tiny.json").read_text())
    record = sidecar["calibration"]
    assert record["method"] == method and record["fit_data"] == FIT_DATA and record["fit_size"] == 400
    assert "TorchScript wrapper" in record["folded_into"] and sidecar["input_size"] == [8, 8]
    assert record.get("temperature") == getattr(calibrator, "temperature", None)


@pytest.mark.parametrize("method", ["temperature", "dirichlet", "histogram"])
def test_torch_model_that_outputs_probabilities(tmp_path, method):
    model = scripted(tmp_path, TinySoftmaxNet())
    predictor = load_predictor(model, device="cpu")
    calibrator, x = fit_on(predictor, method)
    assert predictor.output.kind == "probabilities"
    out = tmp_path / "out"
    out.mkdir()
    calibrated = load_predictor(write_calibrated(model, predictor, calibrator, out), device="cpu")
    assert_same_probabilities(calibrated.predict(x), calibrator, predictor.predict(x))
    assert calibrated.config.output == "logits"


@pytest.mark.parametrize("method", ["temperature", "vector", "matrix", "dirichlet"])
def test_state_dict_folds_linear_maps_into_the_classifier(tmp_path, method):
    """A timm model as safetensors: temperature, vector and matrix scaling change the classifier's weights and
    bias only; Dirichlet calibration (not a map of the logits) becomes a TorchScript wrapper."""
    import timm
    from safetensors.torch import load_file

    torch.manual_seed(0)
    net = timm.create_model("test_resnet", num_classes=K).eval()
    with torch.no_grad():
        net.fc.weight.mul_(20.0)  # logits spread like a trained model's
    save_safetensors(net, tmp_path / "net.safetensors")
    write_sidecar(tmp_path / "net.json", {"arch": "test_resnet", "num_classes": K, "input_size": [16, 16]})
    predictor = load_predictor(tmp_path / "net.safetensors", device="cpu")
    calibrator, x = fit_on(predictor, method, size=16)
    out = tmp_path / "out"
    out.mkdir()
    path = write_calibrated(tmp_path / "net.safetensors", predictor, calibrator, out, fit_data=FIT_DATA)
    record = json.loads((out / "net.json").read_text())["calibration"]
    assert record["method"] == method and record["fit_data"] == FIT_DATA
    folded = method != "dirichlet"  # outputs the calibrated logits W z + b
    calibrated = load_predictor(path, device="cpu").predict(x)
    assert_same_probabilities(calibrated, calibrator, predictor.predict(x), log_probabilities=not folded)
    if not folded:
        assert path.suffix == ".pt" and "TorchScript wrapper" in record["folded_into"]
        return
    assert path.suffix == ".safetensors" and "fc" in record["folded_into"]
    before, after = load_file(str(tmp_path / "net.safetensors")), load_file(str(path))
    assert set(after) == set(before)
    assert all(torch.equal(before[k], after[k]) for k in before if not k.startswith("fc."))
    assert not torch.equal(before["fc.weight"], after["fc.weight"])


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


def test_write_calibrated_refuses_a_calibrator_of_another_class_count(tmp_path):
    src = linear_onnx(tmp_path / "model.onnx", num_classes=K, size=8)
    predictor = load_predictor(src, device="cpu")
    rng = np.random.default_rng(0)
    calibrator = fit_calibrator("vector", rng.normal(size=(50, 5)), rng.integers(0, 5, 50))
    predictor.predict(images(2, seed=0))
    with pytest.raises(InputError, match="fitted on 5 classes"):
        write_calibrated(src, predictor, calibrator, tmp_path / "out")
