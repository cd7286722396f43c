"""The gate's configuration: one key per metric and direction, every bad value a one-line usage error, TOML
files found and read."""

from __future__ import annotations

import pytest

from macs_audit.errors import UsageError
from macs_audit.gating.config import ABSOLUTE_KEYS, find_config, load_config, parse_config
from macs_audit.metrics.registry import GATE_METRICS

# ---------------------------------------------------------------------------------- keys


def test_every_metric_has_exactly_one_absolute_key_in_its_good_direction():
    assert sorted(ABSOLUTE_KEYS.values()) == sorted(GATE_METRICS)
    assert "min_ece" not in ABSOLUTE_KEYS and "max_accuracy" not in ABSOLUTE_KEYS
    assert {
        "max_ece",
        "max_nll",
        "min_accuracy",
        "min_robust_accuracy",
        "min_corruption_accuracy",
        "max_corruption_ece",
        "min_robustness_ratio",
    } <= set(ABSOLUTE_KEYS)


def test_the_mean_corruption_errors_old_keys_are_read_as_the_new_ones_with_a_note():
    config = parse_config(
        {"max_corruption_mce": 1.2, "baseline": {"max_corruption_mce_increase_relative": 0.1}}, "g.toml [gate]"
    )
    assert config.thresholds == {"max_mean_corruption_error": 1.2}
    assert config.baseline == {"max_mean_corruption_error_increase_relative": 0.1}
    first, second = config.notes
    assert first.startswith("g.toml [gate]: max_corruption_mce is deprecated: read as max_mean_corruption_error")
    assert second.startswith("g.toml [gate]: baseline: max_corruption_mce_increase_relative is deprecated")
    assert "its name since report schema 2.0" in first and "its name since report schema 2.0" in second
    assert parse_config({"max_mean_corruption_error": 1.2}).notes == []
    assert "max_corruption_mce" not in ABSOLUTE_KEYS and ABSOLUTE_KEYS["max_mean_corruption_error"]
    with pytest.raises(UsageError, match="sets both max_corruption_mce and max_mean_corruption_error.*keep max_mean"):
        parse_config({"max_corruption_mce": 1.2, "max_mean_corruption_error": 1.1}, "g.toml [gate]")


def test_the_relative_mean_corruption_errors_old_keys_are_read_as_the_new_ones_with_a_note():
    config = parse_config({"max_relative_mce": 1.0, "baseline": {"max_relative_mce_increase": 0.05}}, "g.toml [gate]")
    assert config.thresholds == {"max_relative_mean_corruption_error": 1.0}
    assert config.baseline == {"max_relative_mean_corruption_error_increase": 0.05}
    first, second = config.notes
    assert first.startswith("g.toml [gate]: max_relative_mce is deprecated: read as max_relative_mean_corruption_error")
    assert second.startswith("g.toml [gate]: baseline: max_relative_mce_increase is deprecated")
    assert "its name since report schema 3.0" in first and "its name since report schema 3.0" in second
    assert "max_relative_mce" not in ABSOLUTE_KEYS and ABSOLUTE_KEYS["max_relative_mean_corruption_error"]


# ---------------------------------------------------------------------------------- bad configuration


@pytest.mark.parametrize(
    "table, message",
    [
        ({"max_ecee": 0.1}, "unknown key 'max_ecee'.*did you mean 'max_ece'"),
        ({"min_ece": 0.1}, "unknown key 'min_ece'"),
        ({"max_ece": "0.1"}, "max_ece must be a finite number, got str"),
        ({"max_ece": True}, "max_ece must be a finite number, got bool"),
        ({"max_ece": float("nan")}, "finite number"),
        ({"max_ece": 5}, "max_ece = 5 is outside \\[0, 1\\]: thresholds are fractions \\(0.05 for 5%\\)"),
        ({"min_accuracy": -0.1}, "outside \\[0, 1\\]"),
        ({"corruptions": {"fog": {"min_accuracy": 50}}}, "outside \\[0, 1\\]"),
        ({"baseline": {"max_accuracy_drop": 2}}, "outside \\[0, 1\\]"),
        ({"use_interval": "yes", "max_ece": 0.1}, "use_interval must be true or false"),
        ({"baseline": {"max_ece_increase": -0.01}}, "must be >= 0"),
        ({"baseline": {"max_ece_drop": 0.01}}, "unknown key 'max_ece_drop'"),
        ({"baseline": {"report": 3}}, "report must be a path string"),
        ({"corruptions": {"fgo": {"min_accuracy": 0.5}}}, "unknown key 'fgo'.*'fog'"),
        ({"corruptions": {"fog": {"min_acc": 0.5}}}, "unknown key 'min_acc'.*'min_accuracy'"),
        ({"corruptions": {"fog": 0.5}}, "fog must be a table"),
        ({"corruptions": {"min_accuracy": "high"}}, "must be a finite number"),
        ({"corruptions": 3}, "corruptions must be a table"),
        ({}, "sets no thresholds"),
        ({"use_interval": True}, "sets no thresholds"),
    ],
)
def test_bad_config_is_a_one_line_usage_error(table, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_config(table, "test")
    assert "\n" not in str(info.value) and info.value.exit_code == 2


# ---------------------------------------------------------------------------------- TOML files


def test_load_from_pyproject_and_macs_audit_toml(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.macs-audit.gate]\nmax_ece = 0.05\nuse_interval = true\n'
        "[tool.macs-audit.gate.corruptions.fog]\nmin_accuracy = 0.4\n"
        '[tool.macs-audit.gate.baseline]\nmax_accuracy_drop = 0.005\nreport = "base/main.json"\n'
    )
    cfg = load_config(tmp_path / "pyproject.toml")
    assert cfg.thresholds == {"max_ece": 0.05} and cfg.use_interval is True
    assert cfg.corruption_overrides == {"fog": {"min_accuracy": 0.4}}
    assert cfg.baseline == {"max_accuracy_drop": 0.005}
    assert cfg.baseline_report == tmp_path / "base" / "main.json"  # relative to the config file
    assert "[tool.macs-audit.gate]" in cfg.source

    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "macs-audit.toml").write_text("[gate]\nmin_accuracy = 0.9\n")
    assert load_config(tmp_path / "ci" / "macs-audit.toml").thresholds == {"min_accuracy": 0.9}


def test_find_config_searches_up_to_the_project_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.macs-audit.gate]\nmax_ece = 0.05\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_config(tmp_path / "a" / "b") == tmp_path / "pyproject.toml"
    (tmp_path / "a" / "macs-audit.toml").write_text("[gate]\nmax_ece = 0.1\n")
    assert find_config(tmp_path / "a" / "b") == tmp_path / "a" / "macs-audit.toml"
    assert load_config(start=tmp_path / "a" / "b").thresholds == {"max_ece": 0.1}


def test_no_config_found_is_a_usage_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')  # project root, no gate table
    assert find_config(tmp_path) is None
    with pytest.raises(UsageError, match="no gate thresholds found"):
        load_config(start=tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[gate\nmax_ece = 0.1\n", "not valid TOML"),
        ("[other]\nx = 1\n", "has no \\[tool.macs-audit.gate\\] table"),
        ("[gate]\nmax_ece = 0.1\nmin_acuracy = 0.9\n", "unknown key 'min_acuracy'.*'min_accuracy'"),
        ("[gate]\nmax_ece = [0.1]\n", "must be a finite number, got list"),
    ],
)
def test_bad_toml_files(tmp_path, text, message):
    path = tmp_path / "macs-audit.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as info:
        load_config(path)
    assert "\n" not in str(info.value)


def test_missing_config_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="gate config not found"):
        load_config(tmp_path / "nope.toml")
