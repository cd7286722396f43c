"""The HTML report renders in headless Chromium with its images (skipped without Chromium)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "screenshot_report.py"
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

# The reliability bars are #3366cc at alpha 0.75 over white: this colour exists only inside the
# embedded PNG, never in the page's CSS, so finding it proves the images were decoded and drawn.
BAR_RGB = (0.75 * 0x33 + 0.25 * 255, 0.75 * 0x66 + 0.25 * 255, 0.75 * 0xCC + 0.25 * 255)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_html_report_renders_with_its_images(tmp_path):
    import numpy as np
    from matplotlib.image import imread

    png = tmp_path / "shot.png"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--synthetic",
            "--output",
            str(png),
            "--html",
            str(tmp_path / "report.html"),
            "--height",
            "1400",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pixels = imread(png)[..., :3] * 255
    assert pixels.shape[:2] == (1400, 1280)
    near_bar = (np.abs(pixels - np.array(BAR_RGB)) < 8).all(axis=-1).sum()
    assert near_bar > 2000, f"only {near_bar} pixels of the reliability bars: images did not render"


# Run in the page by Chromium (a copy of it without the CSP, which forbids scripts): what a person sees.
PROBE = """<script>
const links = [...document.querySelectorAll('nav.toc a')].map(a => {
  const target = document.getElementById(a.getAttribute('href').slice(1));
  return {href: a.getAttribute('href'), found: !!target && target.getBoundingClientRect().height > 0};
});
const probe = document.createElement('pre');
probe.id = 'probe';
probe.textContent = JSON.stringify({
  banner: document.getElementById('verdict').innerText,
  links: links,
  scroll: document.documentElement.scrollWidth,
  beside: (() => {
    const row = document.querySelector('#clean ~ .row');
    const table = row.querySelector('table').getBoundingClientRect();
    const figure = row.querySelector('figure').getBoundingClientRect();
    return figure.left >= table.right && figure.top < table.bottom;
  })(),
  width: window.innerWidth,
});
document.body.appendChild(probe);
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_in_a_browser_the_verdict_shows_the_contents_resolve_and_nothing_scrolls_sideways(tmp_path):
    import json
    import re

    sys.path.insert(0, str(ROOT / "tests" / "reports"))
    try:
        from report_cases import failed_gate, full_report
    finally:
        sys.path.remove(str(ROOT / "tests" / "reports"))
    from macs_audit.formats import html

    page = html.render(full_report(), failed_gate())
    probed = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", PROBE + "</body>")
    path = tmp_path / "probe.html"
    path.write_text(probed, encoding="utf-8")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,900",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, done.stdout[-2000:]
    probe = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert probe["banner"].startswith("gate FAILED: 2 of 4 checks failed")
    assert probe["links"] and all(link["found"] for link in probe["links"]), probe["links"]
    assert probe["width"] == 1280 and probe["scroll"] <= probe["width"]  # no horizontal scroll at 1280 px
    assert probe["beside"]  # the clean reliability diagram stands beside its table
