"""models/calibrated_onnx.py: a calibrator's map appended to an ONNX graph, run by onnxruntime directly."""

import numpy as np
import onnx
import pytest
from calibration_helpers import TOLERANCE, K, assert_same_probabilities, fit_on, images
from conftest import linear_onnx

from macs_audit.calibrators.common import softmax
from macs_audit.errors import InputError
from macs_audit.models.calibrated_onnx import fold_calibrator_onnx, fold_temperature_onnx
from macs_audit.models.calibration_map import TEMPERATURE_METADATA_KEY
from macs_audit.models.predictor import load_predictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


def test_temperature_is_one_div_node_and_the_metadata_says_so(tmp_path):
    """fold_temperature_onnx divides the first output by T; the file keeps its metadata, gets the given keys
    and the temperature's; a model of probabilities gets their log first and then declares logits."""
    import onnxruntime as ort

    src = linear_onnx(tmp_path / "model.onnx", num_classes=K, size=8, metadata={"macs_audit.mean": "[0, 0, 0]"})
    fold_temperature_onnx(src, tmp_path / "t.onnx", 2.5, metadata={"num_classes": K})
    proto = onnx.load(str(tmp_path / "t.onnx"))
    assert [n.op_type for n in proto.graph.node][-1] == "Div"
    props = {p.key: p.value for p in proto.metadata_props}
    assert props[TEMPERATURE_METADATA_KEY] == "2.5" and props["macs_audit.num_classes"] == str(K)
    assert props["macs_audit.mean"] == "[0, 0, 0]"  # the model's own metadata kept
    x = images(4, seed=0)
    raw = ort.InferenceSession(str(src)).run(None, {"images": x})[0]
    divided = ort.InferenceSession(str(tmp_path / "t.onnx")).run(None, {"images": x})[0]
    np.testing.assert_allclose(divided, raw / 2.5, rtol=1e-6)
    probs = linear_onnx(tmp_path / "p.onnx", num_classes=K, size=8, softmax=True)
    fold_temperature_onnx(probs, tmp_path / "pt.onnx", 2.0, probabilities=True)
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "pt.onnx")).metadata_props}
    assert props["macs_audit.output"] == '"logits"'
    p = ort.InferenceSession(str(probs)).run(None, {"images": x})[0]
    got = ort.InferenceSession(str(tmp_path / "pt.onnx")).run(None, {"images": x})[0]
    np.testing.assert_allclose(got, np.log(np.maximum(p, 1e-30)) / 2.0, rtol=1e-5)
    with pytest.raises(InputError, match="must be positive"):
        fold_temperature_onnx(src, tmp_path / "bad.onnx", 0.0)
    assert not (tmp_path / "bad.onnx").exists()


def test_an_unreadable_model_is_an_input_error(tmp_path):
    predictor = load_predictor(linear_onnx(tmp_path / "m.onnx", num_classes=K, size=8), device="cpu")
    calibrator, _ = fit_on(predictor, "vector")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(InputError, match="cannot read ONNX model"):
        fold_calibrator_onnx(tmp_path / "broken.onnx", tmp_path / "out.onnx", calibrator)
    assert not (tmp_path / "out.onnx").exists()
