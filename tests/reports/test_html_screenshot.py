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
