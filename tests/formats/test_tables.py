"""The sections' rows of strings (formats/tables.py) that Markdown, HTML and the terminal share."""

from __future__ import annotations

from fixtures.synthetic_report import synthetic_report
from report_cases import bare_report, failed_gate, full_report

from macs_audit.formats import tables


def test_corruption_rows_star_the_extra_corruptions_and_dash_the_cells_not_run():
    r = synthetic_report(corruptions=["fog", "saturate"])
    r.views = [v for v in r.views if not (v.corruption == "fog" and v.severity == 3)]
    header, rows = tables.corruption_rows(r)
    assert header == ["corruption", "family", *(f"sev {s}" for s in range(1, 6)), "mean acc", "mean ECE"]
    assert [row[:2] for row in rows] == [["fog", "weather"], ["saturate *", "digital"]]  # not in the 15
    assert rows[0][4] == "-" and rows[1][4].endswith("%")


def test_view_rows_lead_with_clean_and_absent_sections_have_no_rows():
    report, bare = full_report(), bare_report()
    rows = tables.view_rows(report)
    assert rows[0][0] == "clean" and [row[0] for row in rows[1:]] == [v.name for v in report.views_of("perturbation")]
    assert tables.view_rows(bare) == [] and tables.robustness_rows(bare) == []
    assert tables.corruption_rows(bare) is None and tables.temperature_rows(bare) is None


def test_gate_verdict_names_the_failed_checks():
    gate_result = failed_gate()
    assert tables.gate_verdict(gate_result) == "gate FAILED: 2 of 4 checks failed (min_accuracy, max_ece)"


def test_clean_rows_say_why_every_metric_with_a_bootstrap_interval_has_none():
    from macs_audit.metrics.bootstrap import ERROR_METRICS, MEAN_METRICS
    from macs_audit.metrics.registry import METRICS

    report = synthetic_report(intervals=False, n=1)
    report.conventions.bootstrap_note = "no intervals: a bootstrap needs at least 2 samples, got 1"
    intervals = {label: interval for label, _, interval in tables.clean_rows(report)}
    labels = {tables.clean_label(report, METRICS[name]): name for name in report.clean.metrics if name in METRICS}
    for label, interval in intervals.items():
        assert interval == ("n/a (n = 1)" if labels[label] in MEAN_METRICS + ERROR_METRICS else ""), label
    # The RMS calibration error is absent below 200 images, and so is its row.
    held = {*MEAN_METRICS, *ERROR_METRICS} & set(report.clean.metrics)
    assert {labels[label] for label, i in intervals.items() if i} == held and "ece" in held


def test_per_class_rows_list_the_least_accurate_class_first():
    import copy

    report = copy.deepcopy(synthetic_report())
    report.clean.per_class = [
        {"class": 0, "name": "cat", "n": 10, "accuracy": 0.9, "mean_confidence": 0.95, "ece": 0.05},
        {"class": 1, "name": "dog", "n": 12, "accuracy": 0.5, "mean_confidence": 0.8, "ece": 0.3},
        {"class": 2, "name": "emu", "n": 8, "accuracy": 0.9, "mean_confidence": 0.99, "ece": 0.09},
    ]
    rows = tables.per_class_rows(report)
    assert [r[0] for r in rows] == ["dog", "emu", "cat"]  # ties on accuracy: the worse calibrated first
    assert rows[0] == ["dog", "12", "50.00%", "80.00%", "30.00%"]
    assert tables.per_class_rows(synthetic_report()) == []  # a report without them: no rows
    report.clean.per_class[1].update(coverage=0.75, n_coverage=4)
    assert tables.per_class_header(report)[-1] == "LAC set coverage (held-out images)"
    rows = tables.per_class_rows(report)
    assert rows[0][-1] == "75.00% of 4" and rows[1][-1] == "-"


def test_conformal_rows_show_every_coverage_with_its_clopper_pearson_interval():
    """The clean sets' coverage and the worst class's (with the images it rests on), and the lowest corruption
    view's, each with its 95% Clopper-Pearson interval from the report, in the table that Markdown, HTML and the
    terminal share; a coverage the report holds without one stays bare."""
    from macs_audit.formats import html, markdown, terminal

    report = synthetic_report()
    lac = report.conformal.methods["lac"]
    lac.update(coverage_interval=[0.8812, 0.9176], worst_class_coverage_interval=[0.5321, 0.9612], worst_class_n=12)
    report.conformal.corruption_mean["lac"]["lowest_coverage_interval"] = [0.5512, 0.6473]
    rows = {row[0]: row for row in tables.conformal_rows(report)}
    name = report.data.class_names[lac["worst_class"]]
    clean = rows["LAC, clean"]
    assert clean[1] == "90.00% [88.1, 91.8]" and clean[3] == f"80.00% [53.2, 96.1] {name}, n=12"
    assert rows["LAC, lowest: fog@5"][1] == "60.00% [55.1, 64.7]"
    assert rows["APS, clean"][1] == "91.00%"  # no interval in this report
    for text in (markdown.render(report), html.render(report), terminal.render(report)):
        assert "88.1, 91.8" in text and "53.2, 96.1" in text and "55.1, 64.7" in text
