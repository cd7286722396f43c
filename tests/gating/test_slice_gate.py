"""The gate's [gate.slices] table (gating/config.py, gating/checks.py) and init's commented-out slice keys
(gating/thresholds.py), on the synthetic slice section: a `lighting = dark` slice of 399 images whose accuracy
(41%) falls short of the rest's (64%) significantly, the other slices within the noise."""

from __future__ import annotations

import copy
import re

import pytest
from fixtures.synthetic_report import synthetic_report, synthetic_slices

from macs_audit.errors import InputError, UsageError
from macs_audit.gating.checks import run_gate
from macs_audit.gating.config import SLICE_KEYS, load_config, parse_config
from macs_audit.gating.thresholds import slice_thresholds, starting_config, write_starting_config


@pytest.fixture(scope="module")
def section():
    return synthetic_slices()


@pytest.fixture
def report(section):
    report = synthetic_report()
    report.slices = copy.deepcopy(section)
    return report


def gate(report, use_interval=None, **table):
    return {c.name: c for c in run_gate(report, parse_config({"slices": table}), use_interval=use_interval).checks}


def by_name(report, column, value):
    return next(s for s in report.slices.slices if (s.column, s.value) == (column, value))


def test_the_synthetic_section_is_what_these_tests_assume(report):
    dark = by_name(report, "lighting", "dark")
    assert dark.n == 399 and dark.metrics["accuracy"] == pytest.approx(0.41, abs=0.01)
    assert dark.gaps["accuracy"]["significant"] and dark.gaps["accuracy"]["gap"] < -0.2
    assert report.slices.min_size == 100 and report.slices.multicalibration["value"] == "dark"


# ---------------------------------------------------------------------------------- each key


@pytest.mark.parametrize(
    "key, passing, failing",
    [
        ("min_slice_accuracy", 0.40, 0.60),
        ("max_slice_ece", 0.30, 0.10),
        ("max_slice_accuracy_gap", 0.25, 0.10),
        ("max_multicalibration_error", 0.06, 0.05),
    ],
)
def test_each_key_passes_and_fails_on_the_worst_slice(report, key, passing, failing):
    assert gate(report, **{key: passing})[f"slices.{key}"].passed
    check = gate(report, **{key: failing})[f"slices.{key}"]
    assert not check.passed and check.threshold == failing and check.percent
    assert "lighting = dark" in check.detail  # the worst slice, named


def test_the_per_slice_keys_compare_the_worst_slices_value(report):
    slices = report.slices.slices
    checks = gate(report, min_slice_accuracy=0.6, max_slice_ece=0.1, max_slice_accuracy_gap=0.1)
    accuracy = checks["slices.min_slice_accuracy"]
    assert accuracy.observed == min(s.metrics["accuracy"] for s in slices) and accuracy.op == ">="
    assert accuracy.detail.startswith("lighting = dark: accuracy 41.35% < 60.00% (n=399, the lowest of 10 slices")
    assert checks["slices.max_slice_ece"].observed == max(s.metrics["ece"] for s in slices)
    shortfall = checks["slices.max_slice_accuracy_gap"]
    assert shortfall.observed == pytest.approx(-by_name(report, "lighting", "dark").gaps["accuracy"]["gap"])
    assert "holm correction over 20 tests" in shortfall.detail
    multicalibration = gate(report, max_multicalibration_error=0.01)["slices.max_multicalibration_error"]
    assert multicalibration.observed == report.slices.multicalibration["error"]
    assert "computed over the whole data and slices of at least 100 images" in multicalibration.detail


def test_use_interval_compares_the_pessimistic_end_of_each_slices_interval(report):
    checks = gate(report, use_interval=True, min_slice_accuracy=0.3, max_slice_ece=0.5, max_slice_accuracy_gap=0.5)
    slices = report.slices.slices
    assert checks["slices.min_slice_accuracy"].observed == min(s.intervals["accuracy"][0] for s in slices)
    assert checks["slices.max_slice_ece"].observed == max(s.intervals["ece"][1] for s in slices)
    dark = by_name(report, "lighting", "dark").gaps["accuracy"]
    assert checks["slices.max_slice_accuracy_gap"].observed == pytest.approx(-dark["interval"][0])
    assert all("95% CI" in c.detail for c in checks.values())


def test_a_slice_without_intervals_is_gated_on_its_point_estimate_and_says_so(report):
    dark = by_name(report, "lighting", "dark")
    dark.intervals = {}
    check = gate(report, use_interval=True, min_slice_accuracy=0.3)["slices.min_slice_accuracy"]
    assert check.observed == dark.metrics["accuracy"] and "no bootstrap interval" in check.detail


def test_slice_values_are_escaped_in_the_detail(report):
    by_name(report, "lighting", "dark").value = "dark\x1b[2J"
    detail = gate(report, min_slice_accuracy=0.6)["slices.min_slice_accuracy"].detail
    assert "\x1b" not in detail and "lighting = dark\\x1b[2J: accuracy" in detail


# ---------------------------------------------------------------------------------- the accuracy gap


def test_a_large_gap_that_is_not_significant_never_fails(report):
    camera = by_name(report, "camera", "A")
    camera.gaps["accuracy"] |= {"gap": -0.5, "interval": [-0.9, -0.1], "significant": False}
    check = gate(report, max_slice_accuracy_gap=0.3)["slices.max_slice_accuracy_gap"]
    assert check.passed and "camera = A" not in check.detail and "lighting = dark" in check.detail
    for entry in report.slices.slices:  # no gap significant: nothing falls short, at any bound
        entry.gaps["accuracy"]["significant"] = False
    check = gate(report, max_slice_accuracy_gap=0.0)["slices.max_slice_accuracy_gap"]
    assert check.passed and check.observed == 0.0 and "no slice's accuracy falls short" in check.detail


def test_a_significant_gap_above_the_rest_is_no_shortfall(report):
    normal = by_name(report, "lighting", "normal").gaps["accuracy"]
    assert normal["significant"] and normal["gap"] > 0.2  # the complement of the dark slice
    for key in (("lighting", "dark"), ("brightness", "[0.0007062, 0.2701)")):
        by_name(report, *key).gaps["accuracy"]["significant"] = False
    assert gate(report, max_slice_accuracy_gap=0.0)["slices.max_slice_accuracy_gap"].observed == 0.0


# ---------------------------------------------------------------------------------- min_size


def test_min_size_leaves_the_smaller_slices_out(report):
    check = gate(report, min_size=500, min_slice_accuracy=0.5)["slices.min_slice_accuracy"]
    expected = min((s for s in report.slices.slices if s.n >= 500), key=lambda s: s.metrics["accuracy"])
    assert check.passed and check.observed == expected.metrics["accuracy"] and expected.n == 800
    assert "of 9 slices of at least 500 images" in check.detail and "lighting = dark" not in check.detail


def test_min_size_below_the_reports_is_a_usage_error(report):
    with pytest.raises(UsageError, match="min_size = 50 is below the report's min_size 100.*--min-slice-size 50"):
        gate(report, min_size=50, max_slice_ece=0.5)


def test_min_size_above_every_slice_is_an_input_error(report):
    with pytest.raises(InputError, match="slices of at least 5000 images but the report's largest scored slice"):
        gate(report, min_size=5000, max_slice_ece=0.5)


def test_a_section_that_scored_no_slice_is_an_input_error(report):
    report.slices.slices = []
    with pytest.raises(InputError, match="scored no slice.*--min-slice-size"):
        gate(report, min_slice_accuracy=0.5)


def test_multicalibration_at_a_larger_min_size_is_honoured_where_the_report_can_say(report):
    # Its maximum is at lighting = dark (399 images): the same over slices of at least 200.
    check = gate(report, min_size=200, max_multicalibration_error=0.05)["slices.max_multicalibration_error"]
    assert not check.passed and "the same over slices of at least 200" in check.detail
    # Below 500 images: an error that passes bounds the one over fewer slices from above ...
    check = gate(report, min_size=500, max_multicalibration_error=0.06)["slices.max_multicalibration_error"]
    assert check.passed and "a bound from above on the error over slices of at least 500" in check.detail
    # ... one that fails says nothing about them: refused.
    with pytest.raises(UsageError, match="min_size = 500.*not in the report.*--min-slice-size 500"):
        gate(report, min_size=500, max_multicalibration_error=0.05)
    report.slices.multicalibration |= {"column": None, "value": None, "n": 4000}  # on the whole data: always
    check = gate(report, min_size=500, max_multicalibration_error=0.05)["slices.max_multicalibration_error"]
    assert not check.passed and "at the whole data" in check.detail


# ---------------------------------------------------------------------------------- errors


def test_slice_keys_on_a_report_without_slices_are_an_input_error():
    with pytest.raises(InputError, match="no slices section.*--metadata FILE.*--no-image-slices"):
        run_gate(synthetic_report(), parse_config({"slices": {"max_slice_ece": 0.1}}))


@pytest.mark.parametrize(
    "table, message",
    [
        ({"max_slice_ecee": 0.1}, "unknown key 'max_slice_ecee' in x: slices.*did you mean 'max_slice_ece'"),
        ({"max_slice_ece": 5}, "max_slice_ece = 5 is outside \\[0, 1\\]"),
        ({"min_slice_accuracy": "high"}, "must be a finite number"),
        ({"max_slice_ece": 0.1, "min_size": 1.5}, "min_size must be a whole number of images >= 1, got float"),
        ({"max_slice_ece": 0.1, "min_size": True}, "min_size must be a whole number"),
        ({"min_size": 200}, "sets no threshold; give at least one of min_slice_accuracy"),
        ({}, "sets no threshold"),
    ],
)
def test_bad_slice_tables_are_one_line_usage_errors(table, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_config({"slices": table}, "x")
    assert "\n" not in str(info.value)
    with pytest.raises(UsageError, match="slices must be a table"):
        parse_config({"slices": 0.1})


def test_the_table_is_read_from_pyproject_and_from_macs_audit_toml(tmp_path, report):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.macs-audit.gate.slices]\nmin_slice_accuracy = 0.6\nmin_size = 200\n", encoding="utf-8"
    )
    config = load_config(tmp_path / "pyproject.toml")
    assert config.slices == {"min_slice_accuracy": 0.6} and config.slice_min_size == 200
    (tmp_path / "macs-audit.toml").write_text("[gate.slices]\nmax_slice_ece = 0.3\n", encoding="utf-8")
    assert load_config(tmp_path / "macs-audit.toml").slices == {"max_slice_ece": 0.3}
    assert not run_gate(report, config).passed  # lighting = dark is below 60% and has 399 >= 200 images


def test_slice_thresholds_with_baseline_allowances_run_without_a_baseline(report):
    config = parse_config({"slices": {"max_slice_ece": 0.5}, "baseline": {"max_ece_increase": 0.01}})
    result = run_gate(report, config)
    assert [c.name for c in result.checks] == ["slices.max_slice_ece"] and result.skipped


# ---------------------------------------------------------------------------------- init


def slice_block(text: str, table: str) -> str:
    """The [table.slices] lines init wrote, uncommented."""
    start = text.index(f"# [{table}.slices]")
    lines = []
    for line in text[start:].splitlines():
        if not line.startswith("# [") and not re.match(r"# \w+ = ", line):
            break
        lines.append(line.removeprefix("# "))
    return "\n".join(lines)


def test_init_writes_every_slice_key_commented_out_with_its_margin(report):
    text = starting_config(report, "gate")
    for key in SLICE_KEYS:
        assert re.search(rf"^# {key} = [0-9.]+  # .*; margin \S+ pp: ", text, re.M), key
    assert "# min_size = 100  #" in text and "lighting = dark" in text
    assert "[gate.slices]" not in text.replace("# [gate.slices]", "")  # the table itself commented out too
    assert "slices" not in starting_config(synthetic_report(), "gate")  # no section, no keys


def test_init_slice_thresholds_pass_the_report_by_their_margin(report):
    rows = {t.key: t for t in slice_thresholds(report)}
    assert set(rows) == set(SLICE_KEYS) and not any(t.enabled for t in rows.values())
    dark = by_name(report, "lighting", "dark")
    assert rows["min_slice_accuracy"].observed == dark.metrics["accuracy"]
    low, _ = dark.intervals["accuracy"]
    # sqrt(2) x the lower half-width of the dark slice's own interval, rounded outwards
    assert rows["min_slice_accuracy"].bound == pytest.approx(
        dark.metrics["accuracy"] - 2**0.5 * (dark.metrics["accuracy"] - low), abs=1e-4
    )
    assert "Newcombe" in rows["max_slice_accuracy_gap"].how
    assert "binomial 95% half-width on 399 images" in rows["max_multicalibration_error"].how
    for t in rows.values():
        passes_by = t.observed - t.bound if t.key.startswith("min_") else t.bound - t.observed
        assert t.margin > 0 and passes_by >= t.margin - 1e-12, t


@pytest.mark.parametrize("name, table", [("pyproject.toml", "tool.macs-audit.gate"), ("macs-audit.toml", "gate")])
def test_the_file_init_writes_parses_and_gates_with_the_slice_keys_uncommented(tmp_path, report, name, table):
    path = tmp_path / name
    assert write_starting_config(path, report) == table
    text = path.read_text(encoding="utf-8")
    load_config(path)  # as written: the slice keys commented out
    uncommented = text + "\n" + slice_block(text, table) + "\n"
    path.write_text(uncommented, encoding="utf-8")
    config = load_config(path)
    assert set(config.slices) == set(SLICE_KEYS) and config.slice_min_size == 100
    result = run_gate(report, config)
    assert result.passed and {f"slices.{key}" for key in SLICE_KEYS} <= {c.name for c in result.checks}
    worse = copy.deepcopy(report)
    dark = by_name(worse, "lighting", "dark")
    dark.metrics["accuracy"] -= 0.1
    assert "slices.min_slice_accuracy" in {c.name for c in run_gate(worse, config).failures}
