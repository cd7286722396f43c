"""The one list of report sections: every format shows them in its order, with its titles, and a section
added to the list appears in Markdown, HTML and the terminal in its place."""

from __future__ import annotations

import re

from report_cases import failed_gate, full_report

from macs_audit.formats import html, layout, markdown, terminal
from macs_audit.formats.layout import SECTIONS, Content, Part, Table

WIDE = 200  # no heading wraps


def _extra(report) -> Content:
    return Content((Table(["name", "value"], [["extra row", "1.00%"]]),), detail="its particulars", caption="a note")


def test_a_section_added_to_the_list_appears_in_every_format_in_its_place(monkeypatch):
    report = full_report()
    after = [s.key for s in SECTIONS].index("temperature") + 1
    monkeypatch.setattr(layout, "SECTIONS", (*SECTIONS[:after], Part("extra", "Extra", _extra), *SECTIONS[after:]))

    md = markdown.render(report)
    extra = md.index("### Extra: its particulars\n\na note\n")
    assert md.index("### Temperature scaling") < extra < md.index("### Robustness")
    assert "| extra row | 1.00% |" in md

    page = html.render(report)
    assert page.index('id="temperature"') < page.index('<h2 id="extra">Extra: its particulars</h2>')
    assert page.index('id="extra"') < page.index('id="margins"')
    assert '<td>extra row</td><td class="num">1.00%</td>' in page

    text = terminal.to_text(terminal.renderable(report), width=WIDE)
    assert text.index("Temperature scaling: ") < text.index("Extra: its particulars: a note") < text.index("Robustness")
    assert re.search(r"extra row\s+│\s+1\.00%", text)


def test_every_format_shows_the_sections_in_the_list_order():
    report, gate_result = full_report(), failed_gate()
    present = layout.present(report)
    assert [s.key for s, _ in present] == [s.key for s in SECTIONS if s.build(report) is not None]

    headings = re.findall(r"^### (.*)$", markdown.render(report, gate_result), flags=re.M)
    assert headings[1:] == [markdown.esc(s.heading(c)) for s, c in present if c.tables]  # after the gate's

    ids = re.findall(r'<h2 id="([a-z]+)"', html.render(report, gate_result))
    assert ids == ["gate", *(s.key for s, _ in present), "model", "conventions"]

    text = terminal.to_text(terminal.renderable(report), width=WIDE)
    places = [text.index(s.title) for s, c in present if c.tables]
    assert places == sorted(places)


def test_a_section_with_no_table_is_drawn_in_html_only():
    report = full_report()
    margins = layout.section("margins")
    assert margins.build(report) == Content()  # the report has a margin histogram, and no table of it
    assert 'id="margins">Logit margins</h2>' in html.render(report)
    assert "Logit margins" not in markdown.render(report)
    assert "Logit margins" not in terminal.render(report)
