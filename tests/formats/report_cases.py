"""Reports the format tests share (built once): one with every section, a gate over it, a bare one, one of
hostile strings, and a comparison. Plain functions, not fixtures: a conftest.py here would take the name
`conftest` that other tests import tests/conftest.py by."""

from __future__ import annotations

from functools import cache

from fixtures.synthetic_report import synthetic_report

from macs_audit.compare import Comparison, compare
from macs_audit.gating import GateResult, parse_config, run_gate
from macs_audit.report import Report

EVIL = '<script>alert("x")</script>'  # a string no format may show unescaped


@cache
def full_report() -> Report:
    return synthetic_report(corruptions=["gaussian_noise", "fog", "contrast", "saturate"])


@cache
def failed_gate() -> GateResult:
    """2 of 4 checks fail: accuracy 92% < 95%, ECE 3% > 2%."""
    cfg = parse_config({"min_accuracy": 0.95, "max_ece": 0.02, "max_nll": 1.0, "min_robust_accuracy": 0.5}, "test")
    return run_gate(full_report(), cfg)


@cache
def bare_report() -> Report:
    """Only the clean section: no temperature scaling, margins, robustness or corruptions."""
    r = synthetic_report(robustness=False, corruptions=[])
    r.views, r.temperature_scaling, r.margin_histogram = [], None, None
    return r


def evil_report() -> Report:
    """Class names, a model path and a source that hold markup and table separators."""
    r = synthetic_report(corruptions=["fog"], model_path=f"models/{EVIL}|x.onnx")
    r.data.class_names = [EVIL, "a|b", *"cdefghij"[:8]]
    r.data.source = "src & <b>bold</b>"
    return r


@cache
def regressed_comparison() -> Comparison:
    """B worse than A in several rows, B's model path and class names hostile."""
    a = synthetic_report(corruptions=["fog"])
    b = synthetic_report(accuracy=0.9, ece=0.05, corruptions=["fog"])
    b.model.path, b.data.class_names = EVIL, [EVIL] * 10
    result = compare(a, b, "a.json", EVIL)
    assert result.worse
    return result
