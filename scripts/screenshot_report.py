"""Render a macs-audit HTML report and screenshot it with headless Chromium.

    python scripts/screenshot_report.py --demo-gate          # audit the sample model, -> docs/report-screenshot.png
    python scripts/screenshot_report.py --report r.json      # an existing JSON report
    python scripts/screenshot_report.py --synthetic          # a synthetic report (no model; used by the tests)

Needs Debian's `chromium` (apt-get install -y chromium). Exits 0 after writing the PNG, 2 on bad
arguments, 3 when Chromium or the model is missing or fails.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_MODEL = ROOT / "sample_models" / "resnet9_c10_ce.onnx"
# Enough robustness for every section of the report, small enough for a laptop CPU.
EVALUATE_ARGS = ["--limit", "2000", "--corruptions", "benchmark", "--severities", "1-5", "--quiet"]
# The gate shown in docs/report-screenshot.png: a plausible CI gate that the overconfident sample fails.
DEMO_GATE = {
    "min_accuracy": 0.88,
    "max_ece": 0.03,
    "max_nll": 0.35,
    "min_robust_accuracy": 0.50,
    "min_corruption_accuracy": 0.65,
    "max_corruption_ece": 0.10,
}


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(
    html_path: Path,
    png_path: Path,
    width: int = 1280,
    height: int = 3200,
    chromium: str | None = None,
    timeout: float = 120,
) -> None:
    """Screenshot a local HTML file. Raises RuntimeError with Chromium's output on failure."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("chromium not found (apt-get install -y chromium)")
    png_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="macs-chromium-") as profile:
        cmd = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={png_path}",
            f"--window-size={width},{height}",
            html_path.resolve().as_uri(),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not png_path.is_file():
        raise RuntimeError(f"chromium failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def audit_sample_model(model: Path, out_json: Path) -> None:
    """Audit `model` from the repository's root, named relative to it where it lies inside (the report, and so
    the screenshot, shows `sample_models/...`, not this machine's path)."""
    model = model.resolve()
    shown = model.relative_to(ROOT) if model.is_relative_to(ROOT) else model
    cmd = [sys.executable, "-m", "macs_audit", "evaluate", str(shown), *EVALUATE_ARGS, "-o", str(out_json.resolve())]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"evaluate failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--report", type=Path, help="an existing JSON report")
    source.add_argument("--model", type=Path, help=f"a model to audit first (default {SAMPLE_MODEL.relative_to(ROOT)})")
    source.add_argument("--synthetic", action="store_true", help="a synthetic report (no model needed)")
    gate = parser.add_mutually_exclusive_group()
    gate.add_argument("--config", type=Path, help="gate config: include gate results in the report")
    gate.add_argument("--demo-gate", action="store_true", help="include the results of DEMO_GATE")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "report-screenshot.png")
    parser.add_argument("--html", type=Path, help="also keep the HTML here")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=3200)
    args = parser.parse_args(argv)

    from macs_audit.formats import html
    from macs_audit.gating import load_config, parse_config, run_gate
    from macs_audit.report import load_report

    if find_chromium() is None:
        print("chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="macs-screenshot-") as tmp:
        tmp = Path(tmp)
        if args.synthetic:  # the tests' fixture: a report with every section, made without a model
            sys.path.insert(0, str(ROOT / "tests"))
            from fixtures.synthetic_report import synthetic_report

            report = synthetic_report()
        elif args.report:
            report = load_report(args.report)
        else:
            model = args.model or SAMPLE_MODEL
            if not model.is_file():
                print(f"model not found: {model}", file=sys.stderr)
                return 3
            audit_sample_model(model, tmp / "report.json")
            report = load_report(tmp / "report.json")
        config = (
            load_config(args.config)
            if args.config
            else parse_config(DEMO_GATE, "demo gate")
            if args.demo_gate
            else None
        )
        gate = run_gate(report, config) if config else None
        html_path = args.html or tmp / "report.html"
        html_path.write_text(html.render(report, gate), encoding="utf-8")
        try:
            screenshot(html_path, args.output, args.width, args.height)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(str(exc), file=sys.stderr)
            return 3
    print(f"screenshot written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
