"""HTML format: one self-contained page, its plots embedded, every report string escaped."""

from __future__ import annotations

import base64
import re

from report_cases import bare_report, evil_report, failed_gate, full_report, regressed_comparison

from macs_audit.reports import html

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
    assert not re.search(r"(src|href)=\"(?!data:)", page)  # no external resources of any kind
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


def test_html_comparison_marks_each_regression():
    comparison = regressed_comparison()
    page = html.render_comparison(comparison)
    assert "<script" not in page and page.count('<tr class="worse">') == len(comparison.regressions)
    assert len(images(page)) == 1
