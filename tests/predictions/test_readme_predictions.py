"""README's "Audit predictions from anywhere": its scikit-learn example runs as written (the Python, the two
commands, the Python again), and what it prints is what the README shows (to a tolerance: another scikit-learn may
grow another forest)."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from macs_audit.cli import app

ROOT = Path(__file__).resolve().parents[2]
PERCENT = re.compile(r"(\d+\.\d+)%")


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Audit predictions from anywhere")
    return text[start : text.index("\n## ", start + 1)]


def _blocks(section: str) -> list[tuple[str, str]]:
    """The section's fenced blocks in order: (language, text)."""
    blocks, language, lines = [], None, []
    for line in section.splitlines():
        if line.startswith("```") and language is None:
            language, lines = line[3:], []
        elif line.startswith("```"):
            blocks.append((language, "\n".join(lines) + "\n"))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def _percents(text: str) -> list[float]:
    return [float(value) for value in PERCENT.findall(text)]


def test_the_readme_example_runs_and_prints_what_it_shows(tmp_path, monkeypatch, capsys):
    section = _section()
    blocks = _blocks(section)
    python = [text for language, text in blocks if language == "python"]
    shown = [text for language, text in blocks if language == ""]
    assert len(python) == 2 and len(shown) == 2
    commands = [line[2:].split() for line in shown[0].splitlines() if line.startswith("$ macs-audit ")]
    assert [c[:2] for c in commands] == [["macs-audit", "evaluate"], ["macs-audit", "calibrate"]]
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(python[0], "README.md: the predictions", "exec"), namespace)
    runner = CliRunner()
    evaluate = runner.invoke(app, [*commands[0][1:], "-q"])
    assert evaluate.exit_code == 0, evaluate.output
    summary = shown[0].split("$ macs-audit calibrate")[0]
    # The accuracy, the ECE and its interval, the temperature's before and after: as shown, to a point.
    assert _percents(evaluate.stdout)[:7] == pytest.approx(_percents(summary)[:7], abs=1.0)
    calibrate = runner.invoke(app, commands[1][1:])
    assert calibrate.exit_code == 0, calibrate.output
    assert "calibration map written to calibrated/calibration_map.json" in calibrate.output
    assert (tmp_path / "calibrated" / "calibration_map.json").is_file()
    capsys.readouterr()
    exec(compile(python[1], "README.md: the calibrated predictions", "exec"), namespace)
    printed = capsys.readouterr().out.strip()
    expected = shown[1].strip()
    assert printed.endswith("gate passed: True") and expected.endswith("gate passed: True")
    assert _percents(printed) == pytest.approx(_percents(expected), abs=1.0)
