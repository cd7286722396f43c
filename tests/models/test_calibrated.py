"""models/calibrated.py: every post-hoc calibrator written into the model (write_calibrated), the ONNX graph and
the torch file giving the calibrator's own probabilities (softmax of its transform of the original logits) to
1e-6, read back by the predictors, and recording the method and fit data."""

import json

import numpy as np
import onnx
import pytest
import torch
from calibration_helpers import (
    FIT_DATA,
    K,
    TinyNet,
    TinySoftmaxNet,
    assert_same_probabilities,
    fit_on,
    images,
    scripted,
)
from conftest import linear_onnx

from macs_audit.calibrators.base import METHODS, fit_calibrator
from macs_audit.errors import InputError
from macs_audit.models.calibrated import write_calibrated
from macs_audit.models.calibration_map import CALIBRATION_METADATA_KEY, TEMPERATURE_METADATA_KEY
from macs_audit.models.export import save_safetensors, write_sidecar
from macs_audit.models.predictor import load_predictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


def test_write_calibrated_refuses_a_calibrator_of_another_class_count(tmp_path):
    src = linear_onnx(tmp_path / "model.onnx", num_classes=K, size=8)
    predictor = load_predictor(src, device="cpu")
    rng = np.random.default_rng(0)
    calibrator = fit_calibrator("vector", rng.normal(size=(50, 5)), rng.integers(0, 5, 50))
    predictor.predict(images(2, seed=0))
    with pytest.raises(InputError, match="fitted on 5 classes"):
        write_calibrated(src, predictor, calibrator, tmp_path / "out")
