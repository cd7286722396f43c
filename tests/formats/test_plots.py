"""The HTML format's plots: PNG bytes, or None where the report lacks what they draw."""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report
from report_cases import bare_report, full_report

from macs_audit.formats import plots, tables

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_plots_return_png_or_none():
    report, bare = full_report(), bare_report()
    assert plots.reliability(report.clean).startswith(PNG_SIGNATURE)
    assert plots.margin_histogram(bare) is None and plots.corruption_heatmap(bare) is None
    bare_view = synthetic_report().clean
    bare_view.reliability = None
    assert plots.reliability(bare_view) is None


def test_the_heat_maps_show_accuracy_and_ece_each_in_its_own_percent_scale():
    report = full_report()
    fig = plots.corruption_figure(report)
    heat = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in heat] == [
        "accuracy (%) by corruption and severity",
        "ECE (%) by corruption and severity",
    ]
    accuracy_image, ece_image = (ax.images[0] for ax in heat)
    assert accuracy_image.get_clim() == (0.0, 100.0)  # percent, as the cells are written (was a 0-1 bar)
    largest_ece = max(100 * v.metrics["ece"] for v in report.views_of("corruption"))
    assert ece_image.get_clim()[1] == pytest.approx(largest_ece)
    bars = [ax.get_ylabel() for ax in fig.axes if not ax.get_title()]
    assert bars == ["accuracy (%)", "ECE (%)"]
    names, severities, cells = tables.corruption_grid(report)
    first = cells[(names[0], severities[0])].metrics["ece"]
    assert float(heat[1].texts[0].get_text()) == pytest.approx(100 * first, abs=0.05)  # the cell in percent
    assert plots.corruption_heatmap(report).startswith(PNG_SIGNATURE)
