"""Reduced-precision builds (models/precision.py) of a tiny ONNX model with the real converters: FP16 keeps float32
inputs and outputs and a graph the ONNX checker accepts, INT8 is QDQ with per-channel weights and the activation
type and weight range of its target hardware, both carry the configuration evaluate reads; calibration images
that are not the model's input are refused."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import linear_onnx, tiny_images

from macs_audit.errors import InputError, UsageError
from macs_audit.models.precision import (
    INT8_TARGET_KEY,
    PRECISION_KEY,
    calibration_batches,
    check_int8_target,
    check_precision,
    convert_fp16,
    convert_int8,
)
from macs_audit.models.predictor import load_predictor

META = {"num_classes": 10, "input_size": [32, 32], "class_names": [f"c{i}" for i in range(10)], "output": "logits"}


def outputs(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_fp16_keeps_float32_inputs_outputs_and_the_metadata(tmp_path):
    source = linear_onnx(tmp_path / "float.onnx", seed=2)
    convert_fp16(source, tmp_path / "half.onnx", META)
    proto = onnx.load(str(tmp_path / "half.onnx"))
    onnx.checker.check_model(proto)  # nodes in topological order
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer)
    assert {p.key: p.value for p in proto.metadata_props}[PRECISION_KEY] == "fp16"
    predictor = load_predictor(tmp_path / "half.onnx")
    assert predictor.config.class_names == META["class_names"] and predictor.num_classes == 10
    x = np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
    reference, half = outputs(source, x), outputs(tmp_path / "half.onnx", x)
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, reference, atol=0.05, rtol=0.01)


def test_int8_is_qdq_with_per_channel_weights(tmp_path):
    source = linear_onnx(tmp_path / "float.onnx", seed=2)
    images, _ = tiny_images(64)
    config = load_predictor(source).config
    convert_int8(source, tmp_path / "int8.onnx", META, calibration_batches(images, config))
    proto = onnx.load(str(tmp_path / "int8.onnx"))
    ops = [n.op_type for n in proto.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    scales = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    weight_scales = [scales[n.input[1]] for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    assert any(s.size == 10 for s in weight_scales)  # one scale per output channel of the Gemm's weights
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata[PRECISION_KEY] == "int8" and metadata[INT8_TARGET_KEY] == "x86"  # the default target
    x = calibration_batches(images[:16], config)[0]
    assert np.mean(outputs(tmp_path / "int8.onnx", x).argmax(1) == outputs(source, x).argmax(1)) >= 0.8


def test_calibration_images_must_fit_the_model(tmp_path):
    source = linear_onnx(tmp_path / "float.onnx")
    config = load_predictor(source).config
    gray = np.zeros((8, 32, 32, 1), dtype=np.uint8)
    with pytest.raises(InputError, match="calibration images are 32x32x1 .* 3-channel"):
        calibration_batches(gray, config)
    small = np.zeros((8, 3, 16, 16), dtype=np.float32)
    static = linear_onnx(tmp_path / "static.onnx", size=32)  # a 32x32 input in the graph
    with pytest.raises(InputError, match="calibration inputs are 3x16x16"):
        convert_int8(static, tmp_path / "int8.onnx", META, [small])
    with pytest.raises(UsageError, match="unknown --precision 'bf16'"):
        check_precision("bf16")


def quantised_tensors(proto):
    """(the activations' zero points, the quantised weights) of a QDQ model."""
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    zero_points = [constants[n.input[2]] for n in proto.graph.node if n.op_type == "QuantizeLinear"]
    weights = [constants.get(n.input[0]) for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    return zero_points, [w for w in weights if w is not None and w.ndim == 2]  # not the activations' or the bias


@pytest.mark.parametrize(
    "target, activations, weight_limit, symmetric",
    [("x86", np.uint8, 64, False), ("x86-vnni", np.uint8, 127, False), ("arm", np.int8, 127, True)]
    + [("gpu", np.int8, 127, True)],
)
def test_each_int8_target_is_quantised_as_onnxruntime_advises(tmp_path, target, activations, weight_limit, symmetric):
    """x86: uint8 activations and 7-bit weights, whose sums of two products fit the 16 bits VPMADDUBSW adds them in
    (255 * 64 * 2 < 2**15) on CPUs without VNNI; 8-bit weights elsewhere; symmetric int8 activations for ARM and
    TensorRT."""
    source = linear_onnx(tmp_path / "float.onnx", seed=2)
    images, _ = tiny_images(64)
    batches = calibration_batches(images, load_predictor(source).config)
    convert_int8(source, tmp_path / "int8.onnx", META, batches, target)
    proto = onnx.load(str(tmp_path / "int8.onnx"))
    zero_points, weights = quantised_tensors(proto)
    assert zero_points and all(z.dtype == activations for z in zero_points)
    assert all((z == 0).all() for z in zero_points) == symmetric
    assert weights and all(w.dtype == np.int8 for w in weights)
    assert max(int(np.abs(w.astype(np.int64)).max()) for w in weights) == weight_limit
    assert {p.key: p.value for p in proto.metadata_props}[INT8_TARGET_KEY] == target


def test_an_unknown_int8_target_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown --int8-target 'avx2'; choose from x86, x86-vnni, arm or gpu"):
        check_int8_target("avx2")
