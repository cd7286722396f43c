"""Selective prediction, conformal sets, OOD detection and accuracy without labels, end to end: the audit
writes them, every format shows them, the gate and compare read them through the registry."""

import json

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from PIL import Image
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.errors import InputError
from macs_audit.gating import observe, parse_config, run_gate
from macs_audit.metrics.metric_row import Place
from macs_audit.metrics.registry import GATE_METRICS, in_place
from macs_audit.report import SCHEMA_VERSION, Report, load_report

runner = CliRunner()


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """A tiny model's report with every trust section: OOD data an npz with only `x`, unlabeled images a flat
    folder of PNGs of another size, one corruption and one perturbation view."""
    tmp = tmp_path_factory.mktemp("trust")
    model = linear_onnx(tmp / "m.onnx")
    x, y = tiny_images(200)
    np.savez(tmp / "d.npz", x=x, y=y)
    rng = np.random.default_rng(0)
    np.savez(tmp / "ood.npz", x=rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8))
    (tmp / "flat").mkdir()
    for i, image in enumerate(tiny_images(30, seed=1, size=40)[0]):
        Image.fromarray(image).save(tmp / "flat" / f"{i}.png")
    out = tmp / "r.json"
    args = ["evaluate", str(model), "--data", str(tmp / "d.npz"), "-o", str(out), "--bootstrap", "50"]
    args += ["--ood-data", str(tmp / "ood.npz"), "--unlabeled", str(tmp / "flat"), "--coverage", "0.8"]
    args += ["--corruptions", "gaussian_noise", "--severities", "2", "--perturbations", "noise"]
    args += ["--sensitivity-samples", "0", "--calibrators", "none", "--save-predictions", str(tmp / "p.npz")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out, load_report(out), result.output


def test_the_report_holds_every_section(audited):
    _, report, _ = audited
    metrics = report.clean.metrics
    assert {m.name for m in in_place(Place.SELECTIVE)} <= set(metrics)
    assert len(report.clean.risk_coverage["coverage"]) == 100
    cf = report.conformal
    assert cf.target_coverage == 0.8 and cf.n_calibration + cf.n_eval == 200
    assert (
        set(cf.methods) == {"lac", "aps", "raps", "lac_class_conditional"} and 0 <= cf.methods["lac"]["coverage"] <= 1
    )
    for view in report.views:  # the held-out images of every view, scored with the clean sets
        assert set(view.conformal) == {"lac", "aps", "raps", "lac_class_conditional"} and set(view.metrics) >= set(
            metrics
        ) - {"n"}
    assert cf.corruption_mean["lac"]["lowest_view"] == "gaussian_noise@2"
    assert report.ood.n_in == 200 and report.ood.n_out == 60 and report.ood.format == "npz"
    logit_scores, feature_scores = {"msp", "max_logit", "energy", "gen"}, {"mahalanobis", "rmds", "knn", "vim"}
    assert set(report.ood.scores) == logit_scores | feature_scores | {"react", "ash_s"}  # the CLI reads features
    assert report.ood.features.n_fit + report.ood.features.n_in == 200  # fitted on the split's fit part
    assert set(report.ood.histograms) == set(report.ood.scores)
    assert report.unlabeled.n == 30 and report.unlabeled.format == "imagefolder"
    assert set(report.unlabeled.estimates) == {"atc_mc", "atc_ne", "doc"}
    assert {"selective", "conformal", "ood", "label_free"} <= set(report.conventions.to_dict())
    assert report.seeds["ood"] == report.seeds["unlabeled"] == 0


def test_the_json_reads_back_byte_identical(audited):
    path, report, _ = audited
    assert Report.from_json(path.read_text()).to_json() == path.read_text()
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["ood"]["scores"]["energy"]["intervals"]["auroc"][0] <= data["ood"]["scores"]["energy"]["auroc"]


def test_every_gate_key_of_the_trust_sections_reads_a_value(audited):
    _, report, _ = audited
    for metric in GATE_METRICS.values():
        if metric.place in (Place.SELECTIVE, Place.CONFORMAL, Place.OOD, Place.UNLABELED):
            value, _ = observe(report, metric.name)
            assert np.isfinite(value), metric.name
    _, ci = observe(report, "ood_auroc_energy")
    assert ci is not None and ci[0] <= ci[1]
    assert observe(report, "estimated_accuracy_doc")[1] is not None


def test_the_gate_checks_them_with_todays_strictness(audited):
    _, report, _ = audited
    config = parse_config(
        {"max_aurc": 1.0, "min_conformal_coverage": 0.0, "min_ood_auroc": 1.0, "min_estimated_accuracy": 0.0}
    )
    result = run_gate(report, config, use_interval=True)
    assert [c.name for c in result.failures] == ["min_ood_auroc"]  # the pessimistic end of its interval
    assert "95% CI lower end" in result.checks[2].detail
    with pytest.raises(Exception, match="outside"):
        parse_config({"min_conformal_coverage": 90})  # fractions, as every fraction threshold


def test_a_gate_on_a_section_the_report_lacks_says_how_to_make_it(audited):
    _, report, _ = audited
    bare = Report.from_dict({**report.to_dict(), "ood": None})
    with pytest.raises(InputError, match="--ood-data"):
        observe(bare, "ood_auroc")


def test_every_format_shows_the_sections(audited, tmp_path):
    path, _, terminal = audited
    for title in ("Selective prediction", "Conformal sets", "OOD detection", "Accuracy without labels"):
        assert title in terminal
    for fmt, marker in (("markdown", "### OOD detection"), ("html", 'alt="risk-coverage curve"')):
        out = tmp_path / f"r.{fmt}"
        result = runner.invoke(app, ["report", str(path), "--format", fmt, "-o", str(out)])
        assert result.exit_code == 0, result.output
        text = out.read_text()
        assert marker in text and "Conformal sets" in text and "estimated accuracy, DoC" in text


def test_compare_lists_the_trust_metrics(audited):
    path, _, _ = audited
    result = runner.invoke(app, ["compare", str(path), str(path)])
    assert result.exit_code == 0, result.output
    for label in ("clean AURC", "conformal coverage (LAC)", "OOD AUROC, energy", "estimated unlabeled accuracy"):
        assert label in result.output


def test_bad_coverage_is_a_usage_error(onnx_model, npz_data):
    result = runner.invoke(app, ["evaluate", str(onnx_model), "--data", str(npz_data), "--coverage", "90"])
    assert result.exit_code == 2 and "--coverage" in result.output


def test_no_calibration_split_no_conformal_sets(onnx_model, npz_data, tmp_path):
    out = tmp_path / "r.json"
    args = ["evaluate", str(onnx_model), "--data", str(npz_data), "--calibration-split", "0", "-o", str(out)]
    result = runner.invoke(app, [*args, "--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0"])
    assert result.exit_code == 0, result.output
    report = load_report(out)
    assert report.conformal is None and report.ood is None and "aurc" in report.clean.metrics


def test_label_free_estimates_use_the_audits_temperature_and_the_saved_predictions_recompute_them(audited):
    """The unlabeled estimates are fitted on logits / T (the audit's temperature); --save-predictions holds the
    OOD and unlabeled logits, from which both sections are recomputed."""
    from macs_audit.metrics import label_free, ood

    out, report, _ = audited
    t = report.temperature_scaling.temperature
    saved = np.load(out.parent / "p.npz")
    assert saved["ood_logits"].shape == (60, 10) and saved["unlabeled_logits"].shape == (30, 10)
    again = label_free.estimates(saved["logits"], saved["labels"], saved["unlabeled_logits"], 50, 0, temperature=t)
    for name, estimate in report.unlabeled.estimates.items():
        assert estimate["temperature"] == t
        assert estimate["accuracy"] == pytest.approx(again[name]["accuracy"], abs=1e-6)
    scores = ood.ood_section(saved["logits"], saved["ood_logits"], 50, 0)
    assert report.ood.scores["msp"]["auroc"] == pytest.approx(scores["msp"]["auroc"], abs=1e-6)
