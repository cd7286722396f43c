"""models/onnx.py: the onnxruntime predictor on tiny graphs built in the test (no torch model anywhere)."""

import numpy as np
import onnx
import pytest
from conftest import linear_onnx

from macs_audit.errors import InputError
from macs_audit.models.backend import file_sha256
from macs_audit.models.onnx import OnnxPredictor, missing_external_data, providers_for
from macs_audit.models.preprocessing import resize


def open_onnx(path, flags=None, sidecar=None) -> OnnxPredictor:
    return OnnxPredictor(path, flags or {}, sidecar or {}, "cpu")


def test_the_graph_gives_input_size_class_count_and_the_report_facts(tmp_path):
    path = linear_onnx(tmp_path / "m.onnx", num_classes=7, size=8)
    predictor = open_onnx(path)
    assert predictor.config.input_size == (8, 8) and predictor.num_classes == 7
    assert predictor.config.sources["input_size"] == "metadata"  # the static input counts as the model's own
    assert predictor.info == {
        "path": str(path),
        "format": "onnx",
        "backend": "onnxruntime",
        "device": "cpu",
        "provider": "CPUExecutionProvider",
        "sha256": file_sha256(path),
        "warnings": predictor.info["warnings"],  # CIFAR-10's mean/std for a 7-class model: said, not silent
    }
    assert "--mean" in predictor.info["warnings"][0]


def test_predict_normalises_resizes_and_returns_float32_logits(tmp_path):
    """The logits are the graph's on (x - mean) / std, after the one resize where the images are larger."""
    import onnxruntime as ort

    path = linear_onnx(tmp_path / "m.onnx", num_classes=5, size=8)
    predictor = open_onnx(path, sidecar={"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]})
    x = np.random.default_rng(0).random((3, 3, 16, 16), dtype=np.float32)
    logits = predictor.predict(x)
    session = ort.InferenceSession(str(path))
    expected = session.run(None, {"images": (resize(x, (8, 8)) - 0.5) / 0.25})[0]
    assert logits.dtype == np.float32 and logits.shape == (3, 5)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    assert predictor.output.describe() == "logits (detected)"


def test_probability_outputs_become_log_probabilities(tmp_path):
    predictor = open_onnx(linear_onnx(tmp_path / "p.onnx", num_classes=4, size=8, softmax=True))
    logits = predictor.predict(np.full((2, 3, 8, 8), 0.5, np.float32))
    np.testing.assert_allclose(np.exp(logits).sum(axis=1), 1.0, atol=1e-6)
    assert predictor.output.describe() == "probabilities (detected)"


def test_settings_that_contradict_the_graph_are_input_errors(tmp_path):
    path = linear_onnx(tmp_path / "m.onnx", num_classes=5, size=8)
    with pytest.raises(InputError, match="input is 8x8 but the input size is set to 16x16"):
        open_onnx(path, flags={"input_size": [16, 16]})
    with pytest.raises(InputError, match="has 5 outputs but --num-classes is 3"):
        open_onnx(path, sidecar={"num_classes": 3})


def test_a_dynamic_input_takes_its_size_from_the_settings(tmp_path):
    predictor = open_onnx(linear_onnx(tmp_path / "m.onnx", size="side"), flags={"input_size": [12, 12]})
    assert predictor.config.input_size == (12, 12)
    assert predictor.predict(np.zeros((1, 3, 12, 12), np.float32)).shape == (1, 10)


def test_graphs_that_are_no_image_classifier_are_refused(tmp_path):
    from onnx import TensorProto, helper

    two = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 8, 8]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    flat = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "flat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
    )
    for name, graph, message in (("two", two, "found 2 inputs"), ("flat", flat, "found shape")):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, str(tmp_path / f"{name}.onnx"))
        with pytest.raises(InputError, match=message):
            open_onnx(tmp_path / f"{name}.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(InputError, match="cannot load ONNX model"):
        open_onnx(tmp_path / "junk.onnx")


def test_weights_stored_beside_the_model_are_named_when_missing(tmp_path):
    path = linear_onnx(tmp_path / "m.onnx", size=8)
    proto = onnx.load(str(path))
    onnx.save_model(proto, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    assert missing_external_data(path) == [] and open_onnx(path).num_classes == 10
    (tmp_path / "m.onnx.data").unlink()
    assert missing_external_data(path) == ["m.onnx.data"]
    with pytest.raises(InputError, match=r"stored in m\.onnx\.data beside it, and that file is missing"):
        open_onnx(path)


def test_the_cpu_asks_for_the_cpu_provider_only():
    assert providers_for("cpu") == ["CPUExecutionProvider"]


def _static_batch(path, batch: int):
    """The graph at `path` with its batch dimension fixed to `batch` (as torch.onnx.export leaves it)."""
    model = onnx.load(str(path))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = batch
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("batch", [1, 2])
def test_a_static_batch_runs_at_its_size_and_says_so(tmp_path, batch):
    dynamic = open_onnx(linear_onnx(tmp_path / "dynamic.onnx", num_classes=4, size=8))
    static = open_onnx(_static_batch(linear_onnx(tmp_path / "static.onnx", num_classes=4, size=8), batch))
    assert static.static_batch == batch and dynamic.static_batch is None
    x = np.random.default_rng(1).random((5, 3, 8, 8), dtype=np.float32)  # 5: the last chunk of 2 is padded
    np.testing.assert_allclose(static.predict(x), dynamic.predict(x), rtol=1e-5, atol=1e-6)
    assert any(f"static batch of {batch}" in w for w in static.info["warnings"])
    assert not any("static batch" in w for w in dynamic.info.get("warnings", []))
