"""The shift papers' RMS calibration error on every view an audit scores, not only the shift sets: the clean view,
a perturbation and a corruption cell, each with its bootstrap interval, and its rule in the conventions."""

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images

from macs_audit.auditing import AuditOptions, run_audit
from macs_audit.data.sources import array_source
from macs_audit.metrics.rms_calibration import rms_calibration_error
from macs_audit.models.predictor import load_predictor


def test_every_view_holds_the_rms_calibration_error(tmp_path):
    x, y = tiny_images(250, seed=0)
    source = array_source("tiny", "npz", x, y, [str(i) for i in range(10)])
    predictor = load_predictor(linear_onnx(tmp_path / "m.onnx"), {"mean": [0.5] * 3, "std": [0.25] * 3}, device="cpu")
    options = AuditOptions(
        bootstrap=20, calibration_split=0, perturbations=("noise",), corruptions=("fog",), severities=(1,)
    )
    result = run_audit(predictor, source, options)
    report = result.report
    z = result.logits.astype(np.float64)  # the metrics' softmax is float64
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    expected = rms_calibration_error(p.max(1), p.argmax(1) == result.labels)
    assert report.clean.metrics["rms_calibration_error"] == pytest.approx(expected, rel=1e-9)
    views = [report.clean, *report.views]
    assert {v.kind for v in views} >= {"clean", "perturbation", "corruption"}
    for view in views:
        assert 0 <= view.metrics["rms_calibration_error"] <= 1, view.name
    assert len(report.clean.intervals["rms_calibration_error"]) == 2
    assert "100 samples" in report.conventions.rms_calibration_error
