"""The gate's checks: each on either side of its threshold, baselines, interval gating, metrics a report lacks."""

from __future__ import annotations

import copy
import json

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import InputError, UsageError
from macs_audit.formats import tables
from macs_audit.gating.checks import observe, run_gate
from macs_audit.gating.config import ABSOLUTE_KEYS, BASELINE_KEYS, parse_config
from macs_audit.metrics.metric_row import Place
from macs_audit.metrics.registry import METRICS
from macs_audit.report import Report

EPS = 1e-6


@pytest.fixture(scope="module")
def full_report():
    """Every gate metric present, including the two that need a corruption baseline."""
    report = synthetic_report()
    report.corruption_summary.mean_corruption_error = 0.8
    report.corruption_summary.relative_mean_corruption_error = 0.9
    return report


def gate(report, table, baseline=None, use_interval=None):
    return run_gate(report, parse_config(table, "test"), baseline, use_interval=use_interval)


# ---------------------------------------------------------------------------------- absolute checks


@pytest.mark.parametrize("key", sorted(ABSOLUTE_KEYS))
def test_each_absolute_check_passes_and_fails_either_side_of_its_threshold(full_report, key):
    value, _ = observe(full_report, ABSOLUTE_KEYS[key])
    # min_: pass when the threshold is just below the value; max_: pass when just above.
    good, bad = (value - EPS, value + EPS) if key.startswith("min_") else (value + EPS, value - EPS)
    for threshold, expected in ((good, True), (value, True), (bad, False)):
        result = gate(full_report, {key: threshold})
        (check,) = result.checks
        assert check.passed is expected and result.passed is expected, (key, threshold)
        assert check.name == key and check.observed == pytest.approx(value)
        assert check.op == (">=" if key.startswith("min_") else "<=")


def test_failures_are_listed_and_result_serialises(full_report):
    result = gate(full_report, {"max_ece": 0.5, "min_accuracy": 0.99, "max_nll": 0.1})
    assert not result.passed
    assert [c.name for c in result.failures] == ["min_accuracy", "max_nll"]
    data = result.to_dict()
    assert data["passed"] is False and data["n_checks"] == 3 and data["n_failed"] == 2
    assert set(data["checks"][0]) >= {"name", "metric", "op", "threshold", "observed", "passed", "detail"}


# ---------------------------------------------------------------------------------- per corruption


def test_corruption_defaults_apply_to_every_corruption_and_overrides_to_one():
    report = synthetic_report(corruptions=["fog", "contrast", "snow"])
    per = report.corruption_summary.corruptions
    for name, accuracy in (("fog", 0.50), ("contrast", 0.70), ("snow", 0.80)):
        per[name].accuracy, per[name].ece = accuracy, 0.10
    result = gate(report, {"corruptions": {"min_accuracy": 0.6}})
    assert [c.name for c in result.checks] == [f"corruptions.{n}.min_accuracy" for n in ("fog", "contrast", "snow")]
    assert [c.name for c in result.failures] == ["corruptions.fog.min_accuracy"]
    assert result.checks[0].observed == 0.5 and "default" in result.checks[0].detail

    table = {"corruptions": {"min_accuracy": 0.6, "fog": {"min_accuracy": 0.5 - EPS, "max_ece": 0.1 - EPS}}}
    checks = {c.name: c for c in gate(report, table).checks}
    assert checks["corruptions.fog.min_accuracy"].passed and "override" in checks["corruptions.fog.min_accuracy"].detail
    assert not checks["corruptions.fog.max_ece"].passed
    assert checks["corruptions.contrast.min_accuracy"].passed and "corruptions.contrast.max_ece" not in checks


# ---------------------------------------------------------------------------------- baseline checks


def _with(report, **clean):
    out = copy.deepcopy(report)
    out.clean.metrics.update(clean)
    return out


@pytest.mark.parametrize("key", sorted(BASELINE_KEYS))
def test_each_baseline_check_passes_and_fails_either_side(full_report, key):
    name, relative = BASELINE_KEYS[key]
    base_value, _ = observe(full_report, name)
    allowance = 0.1 if relative else 0.01
    allowed = allowance * abs(base_value) if relative else allowance
    higher = METRICS[name].higher_is_better
    bound = base_value - allowed if higher else base_value + allowed
    for candidate_value, expected in (
        (bound + (EPS if higher else -EPS), True),
        (bound - (EPS if higher else -EPS), False),
    ):
        candidate = _set_metric(full_report, name, candidate_value)
        (check,) = gate(candidate, {"baseline": {key: allowance}}, baseline=full_report).checks
        assert check.passed is expected, (key, candidate_value, bound)
        assert check.threshold == pytest.approx(bound)
        assert check.name == f"baseline.{key}" and "baseline" in check.detail


def _set_metric(report, name, value):
    """A copy of `report` whose gate metric `name` reads `value`."""
    metric = METRICS[name]
    out = copy.deepcopy(report)
    if metric.place in (Place.CLEAN, Place.SELECTIVE):
        out.clean.metrics[name] = value
    elif metric.place is Place.CORRUPTION:
        setattr(out.corruption_summary, metric.report_key, value)
    elif metric.place in (Place.CONFORMAL, Place.OOD, Place.UNLABELED, Place.SHIFT):  # a path through mappings
        *path, last = metric.report_key.split(".")
        table = getattr(out, metric.place.value)
        for step in path:
            table = table[step] if isinstance(table, dict) else getattr(table, step)
        table[last] = value
    elif metric.place is Place.REAL_LABELS:
        setattr(out.real_labels, metric.report_key, value)
    elif metric.place is Place.REPRESENTATION:
        setattr(out.representation_shift.largest, metric.report_key.split(".")[-1], value)
    elif name == "robust_ece":
        out.view("noise+blur").metrics["ece"] = value
    else:
        setattr(out.robustness, name, value)
    assert observe(out, name)[0] == value
    return out


def test_identical_reports_pass_a_zero_allowance(full_report):
    result = gate(full_report, {"baseline": {"max_ece_increase": 0.0, "max_accuracy_drop": 0.0}}, baseline=full_report)
    assert result.passed and len(result.checks) == 2


def test_relative_allowance_scales_with_the_baseline(full_report):
    base = _with(full_report, ece=0.02)
    result = gate(_with(full_report, ece=0.0219), {"baseline": {"max_ece_increase_relative": 0.1}}, baseline=base)
    assert result.passed and result.checks[0].threshold == pytest.approx(0.022)
    result = gate(_with(full_report, ece=0.0221), {"baseline": {"max_ece_increase_relative": 0.1}}, baseline=base)
    assert not result.passed


def test_a_schema_2_0_baseline_is_gated_on_its_relative_mean_corruption_error_with_the_notes(full_report):
    full_report.corruption_summary.relative_mean_corruption_error = 0.9
    old = json.loads(full_report.to_json())
    old["schema_version"] = "2.0"
    summary = old["corruption_summary"]
    renamed = {"relative_mean_corruption_error": "relative_mce"}
    old["corruption_summary"] = {renamed.get(k, k): v for k, v in summary.items()}
    baseline = Report.from_dict(old)
    table = {"max_corruption_mce": 1.0, "baseline": {"max_relative_mean_corruption_error_increase": 0.0}}
    result = gate(full_report, table, baseline=baseline)
    assert result.passed and [c.name for c in result.checks] == [
        "max_mean_corruption_error",
        "baseline.max_relative_mean_corruption_error_increase",
    ]
    assert result.checks[1].threshold == pytest.approx(0.9)  # the baseline's, read from its `relative_mce`
    config_note, report_note = result.notes
    assert "max_corruption_mce is deprecated" in config_note and "corruption_summary.relative_mce" in report_note
    assert "notes" not in result.to_dict()


def test_baseline_and_allowances_must_come_together(full_report):
    with pytest.raises(UsageError, match="no baseline report"):
        gate(full_report, {"baseline": {"max_ece_increase": 0.01}})
    with pytest.raises(UsageError, match="no \\[gate.baseline\\] allowances"):
        gate(full_report, {"max_ece": 0.1}, baseline=full_report)


def test_allowances_without_a_baseline_are_skipped_and_said_so(full_report):
    result = gate(full_report, {"max_ece": 1.0, "baseline": {"max_ece_increase": 0.0, "max_accuracy_drop": 0.0}})
    assert [c.name for c in result.checks] == ["max_ece"] and result.passed
    assert result.skipped == [
        "2 baseline allowances (max_ece_increase, max_accuracy_drop): no baseline report given "
        "(--baseline BASE.json runs them)"
    ]
    assert result.to_dict()["skipped"] == result.skipped
    assert "skipped 2 baseline allowances" in tables.gate_verdict(result)


def test_baseline_missing_the_metric_is_an_input_error(full_report):
    base = synthetic_report(robustness=False)
    with pytest.raises(InputError, match="baseline report has no"):
        gate(full_report, {"baseline": {"max_robust_accuracy_drop": 0.01}}, baseline=base)


# ---------------------------------------------------------------------------------- interval gating


def test_use_interval_gates_on_the_pessimistic_end(full_report):
    lo_ece, hi_ece = full_report.clean.intervals["ece"]
    lo_acc, hi_acc = full_report.clean.intervals["accuracy"]
    ece, acc = full_report.clean.metrics["ece"], full_report.clean.metrics["accuracy"]
    table = {"max_ece": (ece + hi_ece) / 2, "min_accuracy": (acc + lo_acc) / 2}
    assert gate(full_report, table).passed  # the point estimates are inside the thresholds
    result = gate(full_report, {**table, "use_interval": True})
    assert not result.passed and len(result.failures) == 2  # the pessimistic ends are not
    ece_check, acc_check = result.checks
    assert ece_check.observed == hi_ece and "upper end" in ece_check.detail
    assert acc_check.observed == lo_acc and "lower end" in acc_check.detail
    # The argument overrides the config, either way.
    assert not gate(full_report, table, use_interval=True).passed
    assert gate(full_report, {**table, "use_interval": True}, use_interval=False).passed


def test_use_interval_on_a_metric_without_interval_says_so(full_report):
    (check,) = gate(full_report, {"max_brier": 1.0, "use_interval": True}).checks
    assert check.passed and "no bootstrap interval" in check.detail
    (check,) = gate(full_report, {"max_brier": 1.0}).checks
    assert check.detail == "point estimate"


def test_use_interval_on_the_robust_view_uses_its_interval(full_report):
    view = next(v for v in full_report.views if v.name == "noise+blur")
    (check,) = gate(full_report, {"min_robust_accuracy": 0.0, "use_interval": True}).checks
    assert check.observed == view.intervals["accuracy"][0]


def test_use_interval_without_any_bootstrap_is_an_input_error():
    with pytest.raises(InputError, match="bootstrap"):
        gate(synthetic_report(intervals=False), {"max_ece": 0.1, "use_interval": True})


def test_baseline_checks_use_the_candidates_pessimistic_end(full_report):
    hi = full_report.clean.intervals["ece"][1]
    result = gate(full_report, {"baseline": {"max_ece_increase": 0.001}, "use_interval": True}, baseline=full_report)
    assert result.checks[0].observed == hi and not result.passed  # CI half-width 0.005 > allowance


# ---------------------------------------------------------------------------------- metrics the report lacks


@pytest.mark.parametrize(
    "table, message",
    [
        ({"min_robust_accuracy": 0.5}, "robust accuracy.*--perturbations"),
        ({"min_robustness_ratio": 0.5}, "robustness ratio.*--sensitivity-samples"),
        ({"max_robust_ece": 0.5}, "noise\\+blur view"),
        ({"min_corruption_accuracy": 0.5}, "mean_accuracy_15"),
        ({"min_corruption_accuracy_19": 0.5}, "mean_accuracy_19"),
        ({"max_relative_mean_corruption_error": 1.0}, "relative_mean_corruption_error.*--corruption-baseline"),
        ({"corruptions": {"min_accuracy": 0.5}}, "no corruption_summary"),
    ],
)
def test_threshold_on_a_metric_missing_from_the_report_is_an_input_error(table, message):
    bare = synthetic_report(robustness=False, corruptions=[])
    bare.views = []
    with pytest.raises(InputError, match=message) as info:
        gate(bare, table)
    assert "\n" not in str(info.value) and info.value.exit_code == 3


def test_partial_corruption_grid_has_no_15_mean_and_no_unrun_corruption():
    report = synthetic_report(corruptions=["fog", "snow"])
    with pytest.raises(InputError, match="mean_accuracy_15"):
        gate(report, {"min_corruption_accuracy": 0.5})
    with pytest.raises(InputError, match="no such corruption.*fog, snow"):
        gate(report, {"corruptions": {"contrast": {"min_accuracy": 0.5}}})


def test_per_set_shift_thresholds_read_each_sets_restricted_view(full_report):
    accuracy = full_report.shift.sets["sketch"].restricted.metrics["accuracy"]
    result = gate(full_report, {"shift": {"sketch": {"min_accuracy": accuracy - EPS, "max_ece": 0.0}}})
    assert [(c.name, c.passed) for c in result.checks] == [
        ("shift.sketch.min_accuracy", True),
        ("shift.sketch.max_ece", False),
    ]
    interval = full_report.shift.sets["sketch"].restricted.intervals["accuracy"]
    (low,) = gate(full_report, {"shift": {"sketch": {"min_accuracy": 0.0}}}, use_interval=True).checks
    assert low.observed == pytest.approx(interval[0]) and "95% CI" in low.detail
