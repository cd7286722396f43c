"""Reports shared by the format tests: one with every section, a gate over it, a bare one, one of hostile strings,
and a comparison."""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.compare import compare
from macs_audit.gate import parse_config, run_gate

EVIL = '<script>alert("x")</script>'


@pytest.fixture(scope="session")
def evil() -> str:
    """A string no format may show unescaped."""
    return EVIL


@pytest.fixture(scope="session")
def report():
    return synthetic_report(corruptions=["gaussian_noise", "fog", "contrast", "saturate"])


@pytest.fixture(scope="session")
def gate_result(report):
    # 2 of 4 checks fail: accuracy 92% < 95%, ECE 3% > 2%.
    cfg = parse_config({"min_accuracy": 0.95, "max_ece": 0.02, "max_nll": 1.0, "min_robust_accuracy": 0.5}, "test")
    return run_gate(report, cfg)


@pytest.fixture(scope="session")
def bare():
    """Only the clean section: no temperature scaling, margins, robustness or corruptions."""
    r = synthetic_report(robustness=False, corruptions=[])
    r.views, r.temperature_scaling, r.margin_histogram = [], None, None
    return r


@pytest.fixture
def evil_report():
    """Class names, a model path and a source that hold markup and table separators."""
    r = synthetic_report(
        corruptions=["fog"], class_names=[EVIL, "a|b", *"cdefghij"[:8]], model_path=f"models/{EVIL}|x.onnx"
    )
    r.data.source = "src & <b>bold</b>"
    return r


@pytest.fixture(scope="session")
def comparison():
    """B worse than A in several rows, B's model path and class names hostile."""
    a = synthetic_report(corruptions=["fog"])
    b = synthetic_report(accuracy=0.9, ece=0.05, corruptions=["fog"], class_names=[EVIL] * 10)
    b.model.path = EVIL
    result = compare(a, b, "a.json", EVIL)
    assert result.regressions
    return result
