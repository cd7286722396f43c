"""`compare` counts what a team calls a regression (issue 41, item 8): a temperature alone moves the margins,
logit norms, the sensitivity L^ and the conformal set sizes, which are shown ("changed") but never counted;
a real accuracy or calibration regression is; and given the gate's result, every metric it failed is counted.
On real reports of the sample model and its twins with the same predictions (logits / 1.43, logits x 3)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLE_ONNX
from fixtures.broken_models import scaled_logits, swapped_classes
from typer.testing import CliRunner

from macs_audit.auditing import AuditOptions, run_audit
from macs_audit.compare import compare
from macs_audit.data.sources import load_source
from macs_audit.data.splits import stratified_subset
from macs_audit.gating.checks import run_gate
from macs_audit.gating.config import parse_config
from macs_audit.metrics.registry import METRICS
from macs_audit.models.predictor import load_predictor
from macs_audit.report import Report

OPTIONS = AuditOptions(batch_size=250, bootstrap=100, perturbations=(), sensitivity_samples=40)
MECHANICAL = ("mean_margin", "mean_logit_norm", "mean_max_logit", "mean_gradient_norm", "conformal_set_size")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("twins")
    source = load_source(None)
    source = source.subset(stratified_subset(source.labels, 1000, seed=2))
    paths = {
        "baseline": shutil.copy(SAMPLE_ONNX, folder / "baseline.onnx"),
        "scaled": scaled_logits(SAMPLE_ONNX, folder / "scaled.onnx", 1 / 1.43),
        "sharp": scaled_logits(SAMPLE_ONNX, folder / "sharp.onnx", 3.0),
        "swapped": swapped_classes(SAMPLE_ONNX, folder / "swapped.onnx", 10, 3, 5),  # cats and dogs exchanged
    }
    out = {}
    for name, path in paths.items():
        shutil.copy(SAMPLE_ONNX.with_suffix(".json"), path.with_suffix(".json"))
        report = run_audit(load_predictor(path, device="cpu"), source, OPTIONS).report
        out[name] = Report.from_json(report.to_json())
        (folder / f"{name}.json").write_text(out[name].to_json())
    out["folder"] = folder
    return out


def _rows(comparison):
    return {row.key: row for row in comparison.rows}


def test_the_registry_declares_which_metrics_a_temperature_alone_moves():
    assert all(METRICS[name].scale_dependent for name in MECHANICAL)
    # What a temperature leaves alone (accuracy, coverage) or cancels (the robustness ratio, margin / L^).
    assert not any(METRICS[n].scale_dependent for n in ("accuracy", "ece", "conformal_coverage", "robustness_ratio"))


def test_a_temperature_scaled_twin_moves_the_scale_but_counts_no_regression_from_it(reports):
    rows = _rows(compare(reports["baseline"], reports["scaled"]))
    for name in MECHANICAL:  # shown, moved, not judged
        assert rows[name].a is not None and rows[name].b is not None and rows[name].delta != 0, name
        assert rows[name].status == "changed", (name, rows[name].status)
    assert rows["mean_margin"].b == pytest.approx(rows["mean_margin"].a / 1.43, rel=1e-3)
    assert rows["accuracy"].status == "same"
    worse = {r.key for r in compare(reports["baseline"], reports["scaled"]).worse}
    assert not worse & set(MECHANICAL)


def test_real_regressions_are_counted(reports):
    sharp = {r.key for r in compare(reports["baseline"], reports["sharp"]).worse}
    assert {"ece", "nll"} <= sharp and not sharp & set(MECHANICAL)
    swapped = {r.key for r in compare(reports["baseline"], reports["swapped"]).worse}
    assert "accuracy" in swapped


def test_the_headline_counts_every_metric_the_gate_failed(reports):
    """A gate stricter than the noise (max_ece at half the twin's ECE, sets of one class) fails checks that
    compare alone finds better or a temperature's change: each failure is counted."""
    baseline, scaled = reports["baseline"], reports["scaled"]
    ece = scaled.clean.metrics["ece"]
    config = parse_config({"max_ece": ece / 2, "max_conformal_set_size": 1.0, "baseline": {"max_nll_increase": 0.0}})
    result = run_gate(scaled, config, baseline=baseline)
    failed = {c.name for c in result.failures}
    assert "max_ece" in failed and "max_conformal_set_size" in failed
    comparison = compare(baseline, scaled, gate=result)
    counted = {r.key: r for r in comparison.regressions}
    assert {"ece", "conformal_set_size"} <= set(counted)
    assert counted["ece"].gate_failed == "max_ece" and counted["conformal_set_size"].status == "worse"
    assert comparison.to_dict()["n_regressions"] == len(failed) and comparison.to_dict()["gate"]["passed"] is False
    # Without the gate, the same pair counts neither (ECE better, set size a temperature's change).
    plain = {r.key for r in compare(baseline, scaled).worse}
    assert "ece" not in plain and "conformal_set_size" not in plain


def test_compare_gate_on_the_command_line(reports, tmp_path, monkeypatch):
    from macs_audit.cli import app

    folder = reports["folder"]
    config = tmp_path / "macs-audit.toml"
    config.write_text("[gate]\nmax_ece = 0.0001\n\n[gate.baseline]\nmax_accuracy_drop = 0.5\n")
    monkeypatch.chdir(tmp_path)
    args = ["compare", str(folder / "baseline.json"), str(folder / "scaled.json"), "-f", "json"]
    plain = CliRunner().invoke(app, [*args, "--no-gate"])
    assert plain.exit_code == 0, plain.output
    gated = CliRunner().invoke(app, [*args, "--gate"])
    assert gated.exit_code == 0, gated.output
    found = CliRunner().invoke(app, args)  # the config in the working directory, found as `gate` finds it
    before, after = json.loads(plain.stdout), json.loads(gated.stdout)
    assert before["n_regressions"] is None and json.loads(found.stdout)["gate"] == after["gate"]
    assert after["n_regressions"] == 1 and after["gate"]["failed"] == ["max_ece"]
    (ece,) = [r for r in after["rows"] if r["key"] == "ece"]
    assert ece["status"] == "worse" and ece["gate_failed"] == "max_ece"
