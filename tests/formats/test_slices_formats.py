"""The slice section in every human format: the scored slices worst accuracy gap first with their numbers, what
was tested, the multicalibration error, the slices too small to score and the skipped columns, every slice name
escaped; the summary's line; a report without slices as before."""

from __future__ import annotations

import base64
import copy
import re
from functools import cache

import pytest
from fixtures.synthetic_report import synthetic_report, synthetic_slices

from macs_audit.formats import html, layout, markdown, plots, tables, terminal
from macs_audit.formats.summary import summarize
from macs_audit.metrics import slices
from macs_audit.report import Report, Slices

HOSTILE = '<script>alert("x")</script>'
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


@cache
def _section() -> Slices:
    return synthetic_slices()


def sliced(section: Slices | None = None) -> Report:
    """The synthetic report with a copy of `section` (the synthetic slices by default) attached."""
    report = synthetic_report()
    report.slices = copy.deepcopy(section or _section())
    return report


def none_significant() -> Slices:
    section = copy.deepcopy(_section())
    for entry in section.slices:
        entry.significant = False
        for gap in entry.gaps.values():
            gap["significant"] = False
    return section


def points(fraction: float) -> str:
    return f"{100 * fraction:.2f}"


def test_the_synthetic_section_is_what_these_tests_assume():
    section = _section()
    worst = section.slices[0]
    assert (worst.column, worst.value) == ("lighting", "dark") and worst.gaps["accuracy"]["significant"]
    assert [entry["value"] for entry in section.small] == ["tiny\x1b[2J"]
    assert section.correction == "holm" and section.tests == 2 * len(section.slices)
    assert len(section.significant()) >= 2


def test_the_formats_name_every_correction_the_statistics_know():
    for key, (name, rate) in slices.CORRECTIONS.items():
        assert tables.correction_name(key) == name and rate in tables.correction_name(key, controls=True)
    assert tables.correction_name("new") == "new"  # a newer report's correction: its own word


def test_the_slices_come_after_the_classes_in_the_one_order():
    keys = [part.key for part in layout.SECTIONS]
    assert keys.index("slices") == keys.index("per_class") + 1
    assert layout.section("slices").title == "Where it breaks: slices"


def test_markdown_lists_the_worst_slice_first_with_its_numbers_and_what_was_tested():
    section = _section()
    text = markdown.render(sliced())
    at = text.index("### Where it breaks: slices")
    assert text.index("### Clean calibration") < at < text.index("### Temperature scaling")  # no per-class table here
    block = text[at : text.index("### Temperature scaling")]
    worst = section.slices[0]
    accuracy, gap = worst.metrics["accuracy"], worst.gaps["accuracy"]
    low, high = worst.intervals["accuracy"]
    rows = [line for line in block.splitlines() if line.startswith("| ") and " = " in line.split("|")[1]]
    assert len(rows) == len(section.slices)  # every scored slice: Markdown is not capped
    first = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert first[:3] == [
        "lighting = dark",
        f"{worst.n:,}",
        rf"{points(accuracy)}% \[{100 * low:.1f}, {100 * high:.1f}\]",
    ]
    assert first[3].startswith(f"{100 * gap['gap']:+.2f} pp") and first[-1] == "yes"
    smallest = min(gap["adjusted_p_value"], worst.gaps["overconfidence"]["adjusted_p_value"])
    assert first[-2] == f"{smallest:.1e}"
    # The caption: how many slices, columns and tests, the correction, and the metadata file's match
    assert f"{len(section.slices)} slices of 3 columns scored against the rest of the data" in block
    assert f"{section.tests} tests, Holm's correction (family-wise error rate) at 5%" in block
    assert "meta.csv keyed by index: 4,000 of 4,000 images matched, 0 rows unmatched" in block
    found = section.multicalibration
    assert found is not None and found["column"] == "lighting"
    low_bin, high_bin = found["bin"]
    assert (
        f"| multicalibration error | {points(found['error'])}% in lighting = dark, confidence "
        rf"({low_bin:.3g}, {high_bin:.3g}\] ({found['n']} images) |" in block
    )
    # The slice below the minimum size, its ANSI escape written as text (and Markdown's own escapes)
    assert r"| listed, not scored (under 100 images) | camera = tiny\\x1b\[2J (68 images) |" in block
    assert "| not sliced: site | one value, 'lab', for every image |" in block
    assert "\x1b" not in text


def test_html_shows_the_table_and_a_chart_and_escapes_every_slice_name():
    section = copy.deepcopy(_section())
    section.slices[1].value = HOSTILE
    section.small[0]["column"] = HOSTILE
    page = html.render(sliced(section))
    start = page.index('<h2 id="slices">Where it breaks: slices</h2>')
    block = page[start : page.index('<h2 id="temperature"')]
    assert page.index('<h2 id="clean"') < start
    assert '<a href="#slices">Where it breaks: slices</a>' in page
    assert "<tr><td>lighting = dark</td>" in block
    assert block.index("lighting = dark") < block.index("camera = A")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in block and "<script" not in page
    assert "tiny\\x1b[2J" in block and "\x1b" not in page
    assert f"{section.tests} tests" in block
    (chart,) = images(block)
    assert chart.startswith(PNG_SIGNATURE) and len(chart) > 5000


def test_the_chart_draws_a_bar_per_slice_up_to_its_cap():
    report = sliced()
    assert plots.slice_ece(report) is not None
    report.slices.slices = report.slices.slices[:1]
    assert plots.slice_ece(report).startswith(PNG_SIGNATURE)
    report.slices.slices = []
    assert plots.slice_ece(report) is None
    report.slices = None
    assert plots.slice_ece(report) is None


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_lists_the_worst_slices_and_fits_its_width(width):
    section = _section()
    text = terminal.to_text(terminal.renderable(sliced()), width=width)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines if "macs-audit " not in line) <= width, text
    assert "…" not in text and "\x1b" not in text
    at = text.index("Where it breaks: slices")
    block = text[at : text.index("Temperature scaling")]
    assert f"{section.tests} tests, Holm's correction" in " ".join(block.split())
    worst = section.slices[0]
    accuracy = f"{points(worst.metrics['accuracy'])}%"
    assert block.index("lighting =") < block.index(accuracy) < block.index("camera = A")  # the name may wrap
    assert "camera = tiny\\x1b[2J (68 images)" in block and "multicalibration error" in block
    assert "more in the JSON report" not in block  # no more slices than the terminal lists
    if width == 120:  # the table, each interval under its value
        low, high = worst.intervals["accuracy"]
        assert re.search(rf"│ lighting =\s+│\s+{worst.n:,} │\s+{re.escape(accuracy)} │", block), block
        assert f"[{100 * low:.1f}, {100 * high:.1f}]" in block
    else:  # a slice a line, its numbers under it
        assert f"lighting = dark ({worst.n:,} images, significant)" in block


def test_the_terminal_caps_the_table_and_says_how_many_more_the_other_formats_hold():
    section = copy.deepcopy(_section())
    extra = copy.deepcopy(section.slices[-1])
    extra.value = "last"
    section.slices += [copy.deepcopy(extra) for _ in range(4)]  # 14 scored slices
    total = len(section.slices)
    report = sliced(section)
    text = terminal.to_text(terminal.renderable(report), width=200)
    assert f"{total - tables.SLICE_ROWS} more in the JSON report" in text
    assert text.count("lighting = last") == 0 and text.count("│ lighting = normal") == 1
    assert markdown.render(report).count("| lighting = last |") == 4
    assert html.render(report).count("<td>lighting = last</td>") == 4


def finding(report: Report) -> str:
    (value,) = [f.value for f in summarize(report).findings if f.label == "slices"]
    return value


def test_the_summary_names_the_worst_significant_slice_with_its_gap():
    section = _section()
    gap = section.slices[0].gaps["accuracy"]
    low, high = gap["interval"]
    more = len(section.worse()) - 1
    assert more < len(section.significant()) - 1  # lighting = normal differs too, for the better: not counted
    expected = (
        f"lighting = dark is {points(-gap['gap'])} points less accurate [{points(-high)}, {points(-low)}], "
        f"significant after Holm over {section.tests} tests; and {more} more slice{'s' * (more != 1)} "
        "significantly worse"
    )
    report = sliced()
    assert finding(report) == expected
    text = terminal.to_text(terminal.renderable(report), width=300)
    assert f"  slices: {expected}" in text
    assert f"- slices: {markdown.esc(expected)}" in markdown.render(report)
    assert f'<li>slices: <span class="ok">{html.esc(expected)}</span></li>' in html.render(report)
    # A finding, not a problem: the verdict is the report's without slices
    assert summarize(report).verdict == summarize(synthetic_report()).verdict


def test_the_summary_says_overconfident_where_only_that_gap_is_significant():
    section = copy.deepcopy(_section())
    section.slices[0].gaps["accuracy"]["significant"] = False
    gap = section.slices[0].gaps["overconfidence"]
    low, high = gap["interval"]
    assert gap["gap"] > 0
    assert finding(sliced(section)).startswith(
        f"lighting = dark is {points(gap['gap'])} points more overconfident [{points(low)}, {points(high)}], "
    )


def test_the_summary_says_when_no_slice_differs():
    report = sliced(none_significant())
    assert finding(report) == f"no slice significantly worse than the rest ({report.slices.tests} tests, Holm)"
    assert "| yes |" not in markdown.render(report)
    assert "significant)" not in terminal.to_text(terminal.renderable(report), width=80)


def test_benjamini_hochberg_and_a_partial_metadata_match_are_named():
    section = copy.deepcopy(_section())
    section.correction = "bh"
    section.metadata = {
        "file": "meta.csv",
        "keyed_by": "index",
        "rows": 9012,
        "matched": 9000,
        "images_without_metadata": 1000,
        "rows_unmatched": 12,
    }
    section.multicalibration = {**section.multicalibration, "column": None, "value": None}
    report = sliced(section)
    text = markdown.render(report)
    assert "Benjamini-Hochberg's correction (false discovery rate) at 5%" in text
    assert "meta.csv keyed by index: 9,000 of 10,000 images matched, 12 rows unmatched" in text
    assert "in the whole data, confidence (" in text
    assert "significant after Benjamini-Hochberg over" in finding(report)
    section.metadata = None
    caption = layout.section("slices").build(sliced(section)).caption
    assert caption.endswith("Benjamini-Hochberg's correction (false discovery rate) at 5%")


def test_a_report_read_back_from_json_renders_the_same():
    report = sliced()
    again = Report.from_json(report.to_json())
    assert markdown.render(again) == markdown.render(report)
    assert terminal.render(again) == terminal.render(report)


def test_a_report_without_slices_shows_no_slice_section():
    report = synthetic_report()
    assert report.slices is None
    for text in (markdown.render(report), html.render(report), terminal.render(report)):
        assert "Where it breaks" not in text and "slices:" not in text
    assert all(f.label != "slices" for f in summarize(report).findings)
    assert layout.section("slices").build(report) is None


def test_the_summary_does_not_count_a_slice_better_than_the_rest_as_worse():
    section = none_significant()
    normal = next(entry for entry in section.slices if entry.value == "normal")
    normal.significant = normal.gaps["accuracy"]["significant"] = True
    assert normal.gaps["accuracy"]["gap"] > 0 and not normal.worse()
    tests = section.tests
    expected = f"no slice significantly worse than the rest ({tests} tests, Holm); 1 significantly better than the rest"
    assert finding(sliced(section)) == expected


def test_the_terminal_counts_no_more_rows_when_fewer_than_it_shows():
    section = copy.deepcopy(_section())
    section.slices = section.slices[:4]
    text = terminal.to_text(terminal.renderable(sliced(section)), width=120)
    assert "more in the JSON report" not in text and "lighting = dark" in text
