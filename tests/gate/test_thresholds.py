"""`macs-audit init`'s starting thresholds: each gated value of a report loosened by its margin, rounded outwards,
bounded fractions kept in [0, 1]; the TOML written is a config the report passes."""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import UsageError
from macs_audit.gate.checks import locate, run_gate
from macs_audit.gate.config import bound_key, parse_config
from macs_audit.gate.thresholds import starting_config, starting_thresholds
from macs_audit.metrics.registry import GATE_METRICS


def test_starting_thresholds_loosen_every_gated_value_by_the_margin():
    report = synthetic_report()
    absolute, per_corruption = starting_thresholds(report, margin=0.02, relative_margin=0.1)
    bounds = {t.key: t for t in absolute}
    assert set(bounds) == {bound_key(m) for m in GATE_METRICS.values() if locate(report, m)[0] is not None}
    assert bounds["min_accuracy"].bound == pytest.approx(0.90) and bounds["max_ece"].bound == pytest.approx(0.05)
    assert bounds["max_nll"].bound == pytest.approx(0.473)  # 0.43 + 10%
    for t in absolute:  # rounded outwards: never tighter than the value plus the margin
        assert (t.bound <= t.observed) if t.key.startswith("min_") else (t.bound >= t.observed)
    worst = min(c.accuracy for c in report.corruption_summary.corruptions.values())
    assert per_corruption[0].key == "min_accuracy" and per_corruption[0].bound <= worst - 0.02 + 1e-4
    cfg = parse_config(__import__("tomllib").loads(starting_config(report, "gate"))["gate"])
    assert run_gate(report, cfg).passed


def test_bounded_thresholds_stay_in_0_1_and_margins_are_checked():
    report = synthetic_report(accuracy=0.99, ece=0.005)
    bounds = {t.key: t.bound for t in starting_thresholds(report, margin=0.5)[0]}
    assert bounds["max_ece"] <= 1 and bounds["min_accuracy"] >= 0
    with pytest.raises(UsageError, match="margins"):
        starting_thresholds(report, margin=1.5)
