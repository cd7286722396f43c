"""The HTML format's plots: PNG bytes, or None where the report lacks what they draw."""

from __future__ import annotations

from fixtures.synthetic_report import synthetic_report
from report_cases import bare_report, full_report

from macs_audit.reports import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_plots_return_png_or_none():
    report, bare = full_report(), bare_report()
    assert plots.reliability(report.clean).startswith(PNG_SIGNATURE)
    assert plots.margin_histogram(bare) is None and plots.corruption_heatmap(bare) is None
    bare_view = synthetic_report().clean
    bare_view.reliability = None
    assert plots.reliability(bare_view) is None
