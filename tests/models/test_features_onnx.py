"""models/features.py on ONNX models: the graph surgery that exposes the input of the final Gemm or MatMul, its
weight and bias read from the initializers, the `features` output of an exported file, and the bad inputs.

Tolerances: a float32 graph on the CPU gives W f + b within 1e-5 of the largest logit (the check in the code
allows 1e-3); features computed by two backends (onnxruntime, torch) agree within 1e-4 of their largest value."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SAMPLE_ONNX, linear_onnx
from onnx import TensorProto, helper, numpy_helper

from macs_audit.errors import InputError, UsageError
from macs_audit.models.features import FEATURES_OUTPUT, enable_features
from macs_audit.models.predictor import load_predictor


def images(n: int, size: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3, size, size), dtype=np.float32)


def assert_head_gives_logits(head, features, logits):
    scale = max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(head.logits(features), logits, rtol=0, atol=1e-5 * scale)


@pytest.fixture(scope="module")
def sample_images():
    """400 images of the built-in CIFAR-10 test set, float [0, 1] NCHW."""
    from macs_audit.data.sources import load_source

    source = load_source(None)
    x = source.images(np.arange(400))
    return (x.astype(np.float32) / 255.0).transpose(0, 3, 1, 2)


def test_sample_model_features_are_its_torch_classifier_input_and_the_logits_are_unchanged(sample_images):
    plain = load_predictor(SAMPLE_ONNX, device="cpu")
    predictor = load_predictor(SAMPLE_ONNX, device="cpu")
    head = enable_features(predictor)
    logits, features = predictor.predict_with_features(sample_images)
    assert features.dtype == np.float32 and features.shape == (400, 128)
    # the same logits as without features, bit for bit, and as predict() on the modified graph
    np.testing.assert_array_equal(logits, plain.predict(sample_images))
    np.testing.assert_array_equal(logits, predictor.predict(sample_images))
    assert_head_gives_logits(head, features, logits)
    assert head.bias is None and "Gemm" in head.source
    # the torch model the ONNX file was exported from: its fc's input, and fc's weight times its logit scale
    torch_predictor = load_predictor(SAMPLE_ONNX.with_suffix(".safetensors"), device="cpu")
    torch_head = enable_features(torch_predictor)
    torch_logits, torch_features = torch_predictor.predict_with_features(sample_images)
    np.testing.assert_allclose(features, torch_features, rtol=0, atol=1e-4 * np.abs(torch_features).max())
    np.testing.assert_allclose(head.weight, torch_head.weight, rtol=1e-6, atol=0)
    net = torch_predictor.model
    np.testing.assert_allclose(head.weight, net.fc.weight.detach().double().numpy() * net.logit_scale, rtol=1e-6)


def test_linear_onnx_features_are_the_pooled_normalised_image(tmp_path):
    path = linear_onnx(tmp_path / "model.onnx")
    predictor = load_predictor(path, {"mean": [0.5] * 3, "std": [0.25] * 3}, device="cpu")
    head = enable_features(predictor)
    x = images(6)
    logits, features = predictor.predict_with_features(x)
    np.testing.assert_allclose(features, ((x - 0.5) / 0.25).mean(axis=(2, 3)), rtol=0, atol=1e-5)
    proto = onnx.load(str(path))
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    np.testing.assert_array_equal(head.weight, weights["w"].T.astype(np.float64))
    np.testing.assert_array_equal(head.bias, weights["b"].astype(np.float64))
    assert_head_gives_logits(head, features, logits)
    assert head.layer == "flat" and head.source == "ONNX: the input of the Gemm node of 'z'"


def test_a_softmax_output_is_checked_in_probabilities(tmp_path):
    predictor = load_predictor(linear_onnx(tmp_path / "model.onnx", softmax=True), device="cpu")
    head = enable_features(predictor)
    logits, features = predictor.predict_with_features(images(5))
    mapped = head.logits(features)
    softmax = np.exp(mapped - mapped.max(1, keepdims=True))
    np.testing.assert_allclose(softmax / softmax.sum(1, keepdims=True), np.exp(logits), rtol=0, atol=1e-6)


def _graph(nodes, inits, outputs=("logits",), dims=4, classes=3, metadata=None):
    """A model of the image input (N, 3, 8, 8): GlobalAveragePool and Flatten to `pooled` (N, 3), then `nodes`."""
    head = [
        helper.make_node("GlobalAveragePool", ["images"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["pooled"]),
    ]
    shapes = {"logits": ["N", classes], FEATURES_OUTPUT: ["N", dims]}
    graph = helper.make_graph(
        head + nodes,
        "g",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes.get(o, ["N", dims])) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    return model


def _load(model, path: Path):
    onnx.save(model, str(path))
    return load_predictor(path, {"mean": [0.0] * 3, "std": [1.0] * 3, "input_size": [8, 8]}, device="cpu")


def test_matmul_add_and_constant_steps_fold_into_the_head(tmp_path):
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=(3, 3)), rng.normal(size=3)
    nodes = [
        helper.make_node("MatMul", ["pooled", "w"], ["mm"], name="classifier"),
        helper.make_node("Add", ["mm", "b"], ["z"]),
        helper.make_node("Div", ["z", "t"], ["zt"]),
        helper.make_node("Sub", ["shift", "zt"], ["logits"]),  # shift - z / t: affine too
    ]
    inits = {"w": w, "b": b, "t": 2.5, "shift": [0.5, -1.0, 2.0]}
    predictor = _load(_graph(nodes, inits), tmp_path / "m.onnx")
    head = enable_features(predictor)
    x = images(4, size=8)
    logits, features = predictor.predict_with_features(x)
    np.testing.assert_allclose(features, x.mean(axis=(2, 3)), rtol=0, atol=1e-6)
    w32, b32 = w.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(head.weight, -w32.T / np.float32(2.5), rtol=1e-6)
    np.testing.assert_allclose(head.bias, np.array([0.5, -1.0, 2.0]) - b32 / 2.5, rtol=1e-6)
    assert_head_gives_logits(head, features, logits)
    assert head.source == "ONNX: the input of MatMul node 'classifier'"
    by_node = enable_features(predictor, "classifier")  # --feature-layer naming the node: the same head
    np.testing.assert_array_equal(by_node.weight, head.weight)
    assert by_node.layer == "classifier"


def test_an_exported_features_output_is_used_as_it_is(tmp_path):
    """A graph that names its features (as `macs-audit export` writes them): used directly, a constant factor
    between them and the classifier (OpenCLIP's logit scale) folded into the weight."""
    rng = np.random.default_rng(2)
    w = rng.normal(size=(3, 3))
    nodes = [
        helper.make_node("Identity", ["pooled"], [FEATURES_OUTPUT]),
        helper.make_node("Mul", ["scale", FEATURES_OUTPUT], ["scaled"]),
        helper.make_node("MatMul", ["scaled", "w"], ["logits"], name="head"),
    ]
    model = _graph(nodes, {"w": w, "scale": 4.0}, outputs=("logits", FEATURES_OUTPUT))
    predictor = _load(model, tmp_path / "m.onnx")
    session = predictor.session
    head = enable_features(predictor)
    assert predictor.session is session  # no surgery: the graph has the output
    x = images(3, size=8)
    logits, features = predictor.predict_with_features(x)
    np.testing.assert_allclose(features, x.mean(axis=(2, 3)), rtol=0, atol=1e-6)
    np.testing.assert_allclose(head.weight, 4.0 * w.astype(np.float32).T, rtol=1e-6)
    assert head.layer == FEATURES_OUTPUT and "up to a reshape or factor" in head.source
    assert_head_gives_logits(head, features, logits)


def test_a_static_batch_runs_in_chunks_with_its_features(tmp_path):
    proto = onnx.load(str(linear_onnx(tmp_path / "dynamic.onnx")))
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    proto.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 4
    onnx.save(proto, str(tmp_path / "static.onnx"))
    predictor = load_predictor(tmp_path / "static.onnx", device="cpu")
    enable_features(predictor)
    x = images(6)
    logits, features = predictor.predict_with_features(x)
    assert features.shape == (6, 3)
    np.testing.assert_array_equal(logits, predictor.predict(x))


def test_a_model_with_its_weights_in_external_data(tmp_path):
    proto = onnx.load(str(linear_onnx(tmp_path / "inline.onnx")))
    folder = tmp_path / "external"
    folder.mkdir()
    onnx.save_model(proto, str(folder / "m.onnx"), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    predictor = load_predictor(folder / "m.onnx", device="cpu")
    head = enable_features(predictor)
    logits, features = predictor.predict_with_features(images(3))
    assert_head_gives_logits(head, features, logits)


def test_feature_layer_names_a_node_or_a_tensor(tmp_path):
    path = linear_onnx(tmp_path / "model.onnx")
    predictor = load_predictor(path, device="cpu")
    by_tensor = enable_features(predictor, "pooled")  # the Flatten's input: (N, 3, 1, 1), read as (N, 3)
    logits, features = predictor.predict_with_features(images(2))
    assert by_tensor.layer == "pooled" and features.shape == (2, 3)
    assert_head_gives_logits(by_tensor, features, logits)


def one_line_error(error_type, call, match):
    with pytest.raises(error_type, match=match) as caught:
        call()
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_graph_whose_last_layer_is_a_conv_names_what_was_looked_for(tmp_path):
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["images", "k"], ["conv"], name="last_conv"),
        helper.make_node("GlobalAveragePool", ["conv"], ["g2"]),
        helper.make_node("Flatten", ["g2"], ["logits"]),
    ]
    model = _graph(nodes, {"k": rng.normal(size=(3, 3, 1, 1))})
    predictor = _load(model, tmp_path / "conv.onnx")
    message = one_line_error(InputError, lambda: enable_features(predictor), "cannot find the final linear layer")
    assert "Gemm or MatMul" in message and "--feature-layer NAME" in message and "GlobalAveragePool" in message
    one_line_error(InputError, lambda: enable_features(predictor, "last_conv"), "is a Conv, not a Gemm or MatMul")
    one_line_error(InputError, lambda: enable_features(predictor, "gap"), "not a linear map of 'gap'")


def test_bad_feature_layers_and_missing_calls(tmp_path):
    predictor = load_predictor(linear_onnx(tmp_path / "model.onnx"), device="cpu")
    one_line_error(UsageError, lambda: predictor.predict_with_features(images(2)), "enable_features")
    one_line_error(InputError, lambda: enable_features(predictor, "nope"), "has no node or tensor of that name")


def test_a_head_that_does_not_give_the_logits_is_refused_on_the_first_batch(tmp_path):
    """The first batch is checked: a head whose W f + b misses the logits (here its weight doubled) is one line."""
    from macs_audit.models.features import FeatureHead

    predictor = load_predictor(linear_onnx(tmp_path / "model.onnx"), device="cpu")
    head = enable_features(predictor)
    assert predictor.features is not None
    wrong = FeatureHead(head.weight * 2, head.bias, head.layer, head.source)
    predictor.features.head = wrong
    one_line_error(InputError, lambda: predictor.predict_with_features(images(2)), "not a linear map of the input")


def test_an_in_memory_session_has_no_graph_to_read(tmp_path):
    import onnxruntime as ort

    from macs_audit.models.in_memory import predictor_of

    session = ort.InferenceSession(str(linear_onnx(tmp_path / "m.onnx")), providers=["CPUExecutionProvider"])
    predictor = predictor_of(session, {"mean": (0.5,) * 3, "std": (0.25,) * 3, "input_size": 32})
    one_line_error(InputError, lambda: enable_features(predictor), "in-memory ONNX session")
