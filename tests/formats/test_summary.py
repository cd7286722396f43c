"""The audit's bottom line: the findings, each against its stated bar; the fixes with their commands; the
verdict line."""

from __future__ import annotations

from fixtures.synthetic_report import synthetic_report

from macs_audit.formats.summary import BARS, summarize


def test_a_well_calibrated_robust_model_has_no_problem_and_no_fix():
    report = synthetic_report(ece=0.01, corruptions=[])
    report.robust_view().metrics["ece"] = 0.05  # the synthetic views' ECE is the clean one + 10 points
    found = summarize(report)
    assert not any(f.bad for f in found.findings) and found.fixes == ()
    assert found.verdict.startswith("audit: no problem found")


def test_a_miscalibrated_model_gets_temperature_scaling_with_its_command():
    report = synthetic_report(ece=BARS.ece + 0.02, corruptions=[])
    report.robust_view().metrics["ece"] = 0.05
    found = summarize(report)
    ece = next(f for f in found.findings if f.label.startswith("ECE"))
    assert ece.bad and ece.value.startswith("5.00% [")
    (fix,) = found.fixes
    assert "temperature scaling (T = 1.600)" in fix.what
    assert fix.command.startswith("macs-audit calibrate synthetic.onnx")
    assert found.verdict.startswith("audit: 1 problem (ECE 5.00% > 3.00%); 1 fix in the summary")


def test_the_worst_case_is_the_least_accurate_view_or_corruption():
    report = synthetic_report(ece=0.01, corruptions=["fog", "glass_blur"])
    worst = min(report.corruption_summary.corruptions.items(), key=lambda kv: kv[1].accuracy)
    finding = next(f for f in summarize(report).findings if f.label == "worst case")
    robust = report.robust_view().metrics["accuracy"]
    if worst[1].accuracy < robust:
        assert finding.value.startswith(f"corruption {worst[0]} (mean over severities)")
    else:
        assert finding.value.startswith("view noise+blur")


def test_a_collapse_under_perturbation_is_a_problem_with_the_finetune_fix():
    report = synthetic_report(ece=0.01, corruptions=[])
    report.robustness.robust_accuracy = 0.30  # 62 points below clean
    found = summarize(report)
    assert any(f.bad and f.label.startswith("robust accuracy") for f in found.findings)
    assert any(fix.command.startswith("macs-audit finetune") for fix in found.fixes)
    assert "robust accuracy 30.00% (-62.00 pp)" in found.verdict
