"""Re-capture the logs in docs/ci-log.md: run each command with stdout and stderr redirected to one
pipe (as a CI job does) and replace the fenced block under its heading.

    python scripts/capture_ci_log.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ci-log.md"
SAMPLE = "sample_models/resnet9_c10_ce.onnx"
RUNS = {
    "## The README's first command": ["evaluate", SAMPLE],
    "## A full CIFAR-C audit": ["evaluate", SAMPLE, "--corruptions", "cifar-c", "--limit", "200"],
}


def capture(args: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "macs_audit", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"},
    )
    return done.stdout.rstrip("\n")


def main() -> None:
    text = DOC.read_text()
    for heading, args in RUNS.items():
        log = capture(args)
        start = text.index(heading)
        block = re.compile(r"```\n.*?```\n", re.S)
        match = block.search(text, start)
        if match is None:
            raise SystemExit(f"no fenced block under {heading!r} in {DOC}")
        text = text[: match.start()] + "```\n" + log + "\n```\n" + text[match.end() :]
    DOC.write_text(text)


if __name__ == "__main__":
    main()
