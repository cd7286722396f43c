"""HTML format: one self-contained page, its plots embedded, every report string escaped."""

from __future__ import annotations

import base64
import copy
import re

from report_cases import bare_report, evil_report, failed_gate, full_report, regressed_comparison

from macs_audit.formats import html

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_html_is_self_contained_with_embedded_images():
    report, gate_result = full_report(), failed_gate()
    page = html.render(report, gate_result)
    found = images(page)
    # reliability + confidence histogram (clean, and the robust view), margin histogram, corruption heat map
    assert len(found) == 4
    assert all(img.startswith(PNG_SIGNATURE) and len(img) > 5000 for img in found)
    assert not re.search(r"(src|href)=\"(?!data:|#)", page)  # no external resources: in-page links only
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "Content-Security-Policy" in page
    assert "gate FAILED: 2 of 4 checks failed" in page and page.count('<tr class="failed">') == 2
    for section in (
        'id="gate"',
        'id="clean"',
        'id="temperature"',
        'id="margins"',
        'id="robustness"',
        'id="corruptions"',
        'id="conventions"',
    ):
        assert section in page


def test_html_escapes_every_report_string():
    hostile = evil_report()
    page = html.render(hostile)
    assert "<script" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # the class name, shown as text
    assert "src &amp; &lt;b&gt;bold&lt;/b&gt;" in page


def test_html_of_a_bare_report_skips_absent_sections():
    bare = bare_report()
    page = html.render(bare)
    assert len(images(page)) == 1  # the reliability diagram only
    assert 'id="corruptions"' not in page and 'id="robustness"' not in page and 'id="gate"' not in page
    assert 'id="margins"' not in page  # a section drawn only (no table) goes with its plot


def test_html_comparison_marks_each_worse_row():
    comparison = regressed_comparison()
    page = html.render_comparison(comparison)
    assert "<script" not in page and page.count('<tr class="worse">') == len(comparison.worse)
    assert f"{len(comparison.worse)} metrics worse beyond the noise (no gate ran)</div>" in page
    assert len(images(page)) == 1


def test_the_page_opens_with_the_verdict_and_a_table_of_contents_whose_links_resolve():
    page = html.render(full_report(), failed_gate())
    banner = re.search(r'<div class="banner fail" id="verdict">([^<]*)</div>', page)
    assert banner and banner.group(1).startswith("gate FAILED: 2 of 4 checks failed")
    targets = re.findall(r'<a href="#([^"]+)">', page)
    ids = set(re.findall(r' id="([^"]+)"', page))
    assert {"gate", "clean", "robustness", "corruptions", "model", "conventions"} <= set(targets)
    assert set(targets) <= ids  # every link of the contents has its section
    assert page.index('class="toc"') < page.index('id="gate"') < page.index('id="clean"')


def test_without_a_gate_the_banner_is_the_audits_own_verdict_with_its_fixes():
    report = copy.deepcopy(full_report())  # the fixture is shared: changed on a copy
    report.clean.metrics["ece"] = 0.0412  # above the 3% bar: temperature scaling is the fix
    page = html.render(report)
    banner = re.search(r'<div class="banner (pass|fail)" id="verdict">([^<]*)</div>', page)
    assert banner and banner.group(2).startswith("audit: ")
    assert "<code>macs-audit calibrate synthetic.onnx --data HELD_OUT.npz --out calibrated</code>" in page
    assert page.index('id="verdict"') < page.index('class="summary"') < page.index('id="clean"')


def test_failed_checks_come_first_and_skipped_ones_are_said():
    from macs_audit.gating import parse_config, run_gate

    config = parse_config({"max_nll": 1.0, "min_accuracy": 0.95, "baseline": {"max_ece_increase": 0.01}}, "test")
    page = html.render(full_report(), run_gate(full_report(), config))
    gate = page[page.index('id="gate"') : page.index('id="clean"')]
    assert gate.index("min_accuracy") < gate.index("max_nll")  # FAIL before PASS, whatever the config's order
    assert "Skipped: 1 baseline allowance (max_ece_increase): no baseline report given" in gate


def test_every_section_has_its_plain_paragraph_and_the_conventions_read_as_rows():
    report = full_report()
    page = html.render(report)
    for key in ("clean", "temperature", "robustness", "corruptions", "conformal"):
        section = page[page.index(f'<h2 id="{key}">') :]
        assert section.split("</h2>", 1)[1].lstrip().startswith('<p class="explain">'), key
    assert "macs-audit calibrate MODEL --data HELD_OUT.npz --out calibrated." in page
    conventions = page[page.index('id="conventions"') :]
    assert "{" not in conventions.split("<footer>")[0]  # no raw dict
    for key, value in report.conventions.to_dict().items():
        if isinstance(value, dict):
            for sub in value:
                assert f"<td>{html.esc(key)}: {html.esc(sub)}</td>" in conventions


def test_the_temperature_section_draws_the_reliability_before_and_after_scaling():
    report = copy.deepcopy(full_report())
    page = html.render(report)
    assert "before and after temperature scaling" not in page  # the synthetic fit has no bins
    report.temperature_scaling.raw_reliability = report.clean.reliability
    report.temperature_scaling.scaled_reliability = report.robust_view().reliability
    page = html.render(report)
    start = page.index('<h2 id="temperature">')
    section = page[start : page.index("<h2 ", start + 1)]
    assert 'alt="reliability diagram before and after temperature scaling"' in section
    assert len(images(section)) == 1 and images(section)[0].startswith(PNG_SIGNATURE)


def test_a_baseline_gate_shows_the_baseline_beside_the_candidate():
    from fixtures.synthetic_report import synthetic_report

    from macs_audit.gating import parse_config, run_gate

    base, candidate = synthetic_report(accuracy=0.93), synthetic_report(accuracy=0.90)
    config = parse_config({"max_ece": 0.5, "baseline": {"max_accuracy_drop": 0.01}}, "test")
    result = run_gate(candidate, config, baseline=base)
    assert [c.baseline for c in result.checks] == [None, 0.93]
    page = html.render(candidate, result)
    gate = page[page.index('id="gate"') : page.index('id="clean"')]
    assert "<th>baseline</th><th>observed</th>" in gate
    row = gate[gate.index("baseline.max_accuracy_drop") :].split("</tr>")[0]
    assert '<td class="num">93.00%</td><td class="num">90.00%</td>' in row


def test_the_per_class_section_shows_the_worst_class_first_with_its_paragraph():
    report = copy.deepcopy(full_report())
    assert 'id="per_class"' not in html.render(report)  # the synthetic report has no per-class rows
    report.clean.per_class = [
        {"class": 0, "name": "cat", "n": 10, "accuracy": 0.9, "mean_confidence": 0.95, "ece": 0.05},
        {"class": 1, "name": "dog", "n": 12, "accuracy": 0.5, "mean_confidence": 0.8, "ece": 0.3},
    ]
    page = html.render(report)
    start = page.index('<h2 id="per_class">')
    section = page[start : page.index("<h2 ", start + 1)]
    assert section.index("<td>dog</td>") < section.index("<td>cat</td>") and 'class="explain"' in section
    assert '<a href="#per_class">' in page
