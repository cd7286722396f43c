"""`macs-audit init`'s starting thresholds: the default metrics set at their values loosened by the noise of
their estimates (sqrt(2) x the half-width of their own 95% interval, binomial where the report has none,
conformal coverage against its target), the others commented out at their values; rounded outwards,
bounded fractions kept in [0, 1]; the TOML written is a config the report passes, with and without a
baseline."""

from __future__ import annotations

import math

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import UsageError
from macs_audit.gating.checks import locate, run_gate
from macs_audit.gating.config import bound_key, parse_config
from macs_audit.gating.thresholds import DEFAULT_METRICS, starting_config, starting_thresholds
from macs_audit.metrics.registry import GATE_METRICS, METRICS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _by_key(report, **margins):
    absolute, per_corruption = starting_thresholds(report, **margins)
    return {t.key: t for t in absolute}, per_corruption


def test_the_default_metrics_are_set_and_the_rest_written_loosened_alike():
    report = synthetic_report()
    bounds, per_corruption = _by_key(report)
    assert set(bounds) == {bound_key(m) for m in GATE_METRICS.values() if locate(report, m)[0] is not None}
    enabled = {key for key, t in bounds.items() if t.enabled}
    assert enabled == {bound_key(METRICS[name]) for name in DEFAULT_METRICS}
    for t in [*bounds.values(), *per_corruption]:  # rounded outwards, never at the value: passed by the margin
        assert t.margin > 0 and t.how
        assert (t.observed - t.bound if t.key.startswith("min_") else t.bound - t.observed) >= t.margin - 1e-12
    assert per_corruption and not any(t.enabled for t in per_corruption)


def test_each_margin_comes_from_its_own_interval():
    report = synthetic_report()  # accuracy 92% [91.5%, 92.5%], NLL 0.43 [0.42, 0.44]
    bounds, _ = _by_key(report)
    assert bounds["min_accuracy"].bound == pytest.approx(0.92 - math.sqrt(2) * 0.005, abs=1e-4)
    assert bounds["max_nll"].bound == pytest.approx(0.43 + math.sqrt(2) * 0.01, abs=1e-4)
    assert "95% bootstrap interval [91.50%, 92.50%]" in bounds["min_accuracy"].how
    robust = report.robust_view().intervals["accuracy"]
    assert bounds["min_robust_accuracy"].margin == pytest.approx(math.sqrt(2) * (0.72 - robust[0]))
    # No interval for the corruption mean: the binomial one on the report's images, and said so.
    corruption = bounds["min_corruption_accuracy"]
    p = corruption.observed
    assert corruption.margin == pytest.approx(math.sqrt(2) * 1.96 * math.sqrt(p * (1 - p) / 10000), rel=1e-3)
    assert "binomial" in corruption.how and "no interval" in corruption.how
    # Coverage against its target, less the binomial noise of the held-out images, or its own value less the
    # noise of a difference where that is lower (never at its value).
    coverage = bounds["min_conformal_coverage"]
    n, p = report.conformal.n_eval, coverage.observed
    own = p - math.sqrt(2) * 1.96 * math.sqrt(p * (1 - p) / n)
    assert coverage.bound == pytest.approx(min(0.9 - 1.96 * math.sqrt(0.09 / n), own), abs=1e-4)
    assert "target 90.00%" in coverage.how


def test_a_larger_sample_gives_tighter_margins():
    small, large = synthetic_report(n=300), synthetic_report(n=10000)
    corruption = [_by_key(r)[0]["min_corruption_accuracy"].margin for r in (small, large)]
    assert corruption[0] > corruption[1]


def test_flat_margins_replace_the_noise_and_are_checked():
    report = synthetic_report()
    bounds, _ = _by_key(report, margin=0.02, relative_margin=0.1)
    assert bounds["min_accuracy"].bound == pytest.approx(0.90) and bounds["max_ece"].bound == pytest.approx(0.05)
    assert bounds["max_nll"].bound == pytest.approx(0.473)  # 0.43 + 10%
    report = synthetic_report(accuracy=0.99, ece=0.005)
    bounds, _ = _by_key(report, margin=0.5)
    assert bounds["max_ece"].bound <= 1 and bounds["min_accuracy"].bound >= 0
    with pytest.raises(UsageError, match="margins"):
        starting_thresholds(report, margin=1.5)


def test_the_written_config_passes_its_report_with_and_without_a_baseline():
    report = synthetic_report()
    text = starting_config(report, "gate")
    assert "\n# max_mce = " in text and "\nmin_accuracy = " in text  # the rest commented out
    cfg = parse_config(tomllib.loads(text)["gate"])
    assert set(cfg.baseline) == {
        "max_accuracy_drop",
        "max_ece_increase",
        "max_nll_increase",
        "max_robust_accuracy_drop",
        "max_corruption_accuracy_drop",
    }
    alone = run_gate(report, cfg)
    assert alone.passed and alone.skipped and "no baseline report given" in alone.skipped[0]
    assert not any(c.name.startswith("baseline.") for c in alone.checks)
    against = run_gate(report, cfg, baseline=report)
    assert against.passed and not against.skipped
    assert sum(c.name.startswith("baseline.") for c in against.checks) == 5


def test_a_model_worse_beyond_the_noise_fails():
    cfg = parse_config(tomllib.loads(starting_config(synthetic_report(), "gate"))["gate"])
    worse = synthetic_report(accuracy=0.90, ece=0.05)
    result = run_gate(worse, cfg, baseline=synthetic_report())
    failed = {c.name for c in result.failures}
    assert {"min_accuracy", "max_ece", "baseline.max_accuracy_drop", "baseline.max_ece_increase"} <= failed
