"""The committed sample model: its ONNX file and safetensors checkpoint give the same audit."""

from pathlib import Path

import numpy as np
import pytest

from macs_audit.auditing import AuditOptions, run_audit
from macs_audit.data.sources import load_source
from macs_audit.data.splits import stratified_subset
from macs_audit.models.predictor import load_predictor

SAMPLE = Path(__file__).resolve().parents[1] / "sample_models" / "resnet9_c10_ce"


@pytest.mark.skipif(not SAMPLE.with_suffix(".onnx").exists(), reason="sample model not built")
def test_onnx_and_safetensors_agree():
    source = load_source(None)
    source = source.subset(stratified_subset(source.labels, 2000, seed=0))
    options = AuditOptions(bootstrap=0, calibration_split=0)
    results = {}
    for suffix in (".onnx", ".safetensors"):
        predictor = load_predictor(SAMPLE.with_suffix(suffix), device="cpu")  # no flags: the sidecar suffices
        results[suffix] = run_audit(predictor, source, options)
    onnx, torch_ = results[".onnx"], results[".safetensors"]
    assert torch_.report.model.arch == "macs_resnet9_c10" and torch_.report.model.format == "safetensors"
    for key in ("accuracy", "ece", "nll"):
        assert abs(onnx.report.clean.metrics[key] - torch_.report.clean.metrics[key]) <= 1e-4, key
    assert np.abs(onnx.logits - torch_.logits).max() < 1e-3
    assert onnx.report.clean.metrics["accuracy"] > 0.85
