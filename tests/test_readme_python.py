"""README's "Use it from Python": its example runs as written, and the ECE it prints is the one `macs-audit evaluate`
writes for the same options."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from macs_audit.cli import app

ROOT = Path(__file__).resolve().parents[1]


def _example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Use it from Python") :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)  # type: ignore[union-attr]


def test_the_readme_example_prints_the_ece_the_cli_writes(tmp_path, monkeypatch, capsys):
    code = _example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 5  # the promise: five lines
    monkeypatch.chdir(ROOT)  # the example names the sample model by its path in the repository
    code = code.replace('"audit.html"', repr(str(tmp_path / "audit.html")))
    exec(compile(code, "README.md: Use it from Python", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert (tmp_path / "audit.html").is_file()
    call = re.search(r"macs_audit\.audit\((.*)\)", code).group(1)  # type: ignore[union-attr]
    model = re.search(r'"([^"]+\.onnx)"', call).group(1)  # type: ignore[union-attr]
    limit = re.search(r"limit=(\d+)", call).group(1)  # type: ignore[union-attr]
    preset = re.search(r'preset="(\w+)"', call).group(1)  # type: ignore[union-attr]
    report = tmp_path / "cli.json"
    args = ["evaluate", model, "--limit", limit, "--preset", preset, "-o", str(report), "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    ece = json.loads(report.read_text())["clean"]["metrics"]["ece"]
    assert printed.strip() == f"ECE {ece:.4f}"
