"""`macs-audit gate`, `report` and `compare`: read saved JSON reports, never the model.

None of these import torch or onnxruntime (tested). Output: `--format` (repeatable) picks
terminal, json, md, junit or html; without `--output` every format goes to stdout; with
`--output` (repeatable) the i-th output file gets the i-th format, or the format its extension
names (.json .md .xml .html .txt) when no --format is given. Files are written atomically.
Exit codes: 0 pass (or rendered), 1 gate failed, 2 usage error, 3 input error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

import typer

from macs_audit.cli.common import app, handle_errors, stderr, stdout
from macs_audit.errors import InputError, UsageError

if TYPE_CHECKING:
    from macs_audit.gate import GateConfig, GateResult
    from macs_audit.report import Report

FORMATS = ("terminal", "json", "md", "junit", "html")
ALIASES = {"markdown": "md", "xml": "junit", "txt": "terminal", "text": "terminal"}
EXTENSIONS = {".json": "json", ".md": "md", ".markdown": "md", ".xml": "junit", ".html": "html", ".htm": "html",
              ".txt": "terminal"}

FORMAT_HELP = "Output format: terminal, json, md, junit or html. Repeatable."
OUTPUT_HELP = ("Write to this file (atomically) instead of stdout. Repeatable: pairs with --format in order, "
               "or the extension (.json .md .xml .html .txt) names the format.")
CONFIG_HELP = "Gate thresholds: a macs-audit.toml ([gate]) or pyproject.toml ([tool.macs-audit.gate]). Default: searched from the current directory."
BASELINE_HELP = "Baseline report for the [gate.baseline] regression checks."
INTERVAL_HELP = "Gate on the pessimistic end of the 95% bootstrap interval (default: the config's use_interval)."
SUMMARY_HELP = "Append the Markdown to $GITHUB_STEP_SUMMARY when that is set."


def resolve_outputs(formats: list[str] | None, outputs: list[Path] | None,
                    default: str = "terminal") -> list[tuple[str, Path | None]]:
    """[(format, path or None for stdout)], validated before any work is done."""
    names = []
    for name in formats or []:
        name = ALIASES.get(name.lower(), name.lower())
        if name not in FORMATS:
            raise UsageError(f"unknown --format {name!r}; choose from {', '.join(FORMATS)}")
        names.append(name)
    outputs = list(outputs or [])
    if not outputs:
        return [(name, None) for name in (names or [default])]
    if not names:
        for path in outputs:
            if path.suffix.lower() not in EXTENSIONS:
                raise UsageError(f"cannot tell the format of --output {path} from its extension; add --format")
        return [(EXTENSIONS[path.suffix.lower()], path) for path in outputs]
    if len(names) != len(outputs):
        raise UsageError(f"{len(names)} --format but {len(outputs)} --output; give one --output per --format "
                         "(or only --output, with extensions naming the formats)")
    return list(zip(names, outputs))


def emit(targets: list[tuple[str, Path | None]], render: Callable[[str], object]) -> None:
    """Render each format once and send it to its file or to stdout."""
    from macs_audit.atomic import write_text
    from macs_audit.reports import terminal

    for name, path in targets:
        content = render(name)
        if path is None:
            if name == "terminal":
                stdout.print(content)
            else:
                typer.echo(content, nl=not str(content).endswith("\n"))
        else:
            write_text(path, terminal.to_text(content) if name == "terminal" else content)
            stderr.print(f"{name} written to {path}", markup=False, highlight=False)


def append_step_summary(markdown_text: str) -> None:
    """GitHub Actions shows $GITHUB_STEP_SUMMARY on the run page; several steps may append to it."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown_text.rstrip("\n") + "\n\n")
    except OSError as exc:
        raise InputError(f"cannot append to $GITHUB_STEP_SUMMARY ({path}): {exc.strerror}") from None


def render_report(name: str, report: Report, gate: GateResult | None, terminal_gate_only: bool = False):
    """One format of a report (with gate results if given)."""
    from macs_audit.reports import terminal

    if name == "terminal":
        return terminal.gate_table(gate) if terminal_gate_only and gate is not None else terminal.render_all(report, gate)
    if name == "json":
        from macs_audit.reports import json_report
        return json_report.render(report, gate)
    if name == "md":
        from macs_audit.reports import markdown
        return markdown.render(report, gate)
    if name == "html":
        from macs_audit.reports import html
        return html.render(report, gate)
    if gate is None:  # junit
        raise UsageError("JUnit output lists gate checks: use `macs-audit gate REPORT --format junit`, "
                         "or `report --gate` / `--config`")
    from macs_audit.reports import junit
    return junit.render(report, gate)


def gate_report(report: Report, config: Path | GateConfig | None = None, baseline: Path | None = None,
                use_interval: bool | None = None, formats: list[str] | None = None,
                outputs: list[Path] | None = None, step_summary: bool = True) -> int:
    """Gate `report`, write the requested formats, print the verdict; return the exit code (0 or 1).

    `config`: a path, an already loaded GateConfig (so `evaluate --gate` can validate it before
    the audit runs), or None to search from the current directory. Raises MacsAuditError
    (exit 2 or 3) for bad configuration or inputs. The terminal format shows the gate table only.
    """
    from macs_audit import gate as gate_core
    from macs_audit.report import load_report
    from macs_audit.reports import markdown, tables

    cfg = config if isinstance(config, gate_core.GateConfig) else gate_core.load_config(config)
    targets = resolve_outputs(formats, outputs)
    baseline_path = baseline if baseline is not None else cfg.baseline_report
    base = load_report(baseline_path) if baseline_path is not None else None
    result = gate_core.run_gate(report, cfg, base, use_interval=use_interval,
                                baseline_name=str(baseline_path) if baseline_path is not None else None)
    emit(targets, lambda name: render_report(name, report, result, terminal_gate_only=True))
    if step_summary:
        append_step_summary(markdown.render(report, result))
    stderr.print(tables.gate_verdict(result), style="bold green" if result.passed else "bold red", markup=False,
                 highlight=False, soft_wrap=True)
    return 0 if result.passed else 1


@app.command()
@handle_errors
def gate(
    report_path: Path = typer.Argument(..., metavar="REPORT.json", help="A report written by `evaluate -o`."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help=BASELINE_HELP),
    use_interval: Optional[bool] = typer.Option(None, "--use-interval/--point-estimate", help=INTERVAL_HELP, show_default=False),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    outputs: Optional[List[Path]] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    step_summary: bool = typer.Option(True, "--step-summary/--no-step-summary", help=SUMMARY_HELP),
) -> None:
    """Check a saved report against calibration thresholds: exit 0 if every check passes, 1 if any fails."""
    from macs_audit import gate as gate_core
    from macs_audit.report import load_report

    cfg = gate_core.load_config(config)  # usage errors (exit 2) before input errors (exit 3)
    resolve_outputs(formats, outputs)
    raise typer.Exit(gate_report(load_report(report_path), cfg, baseline, use_interval, formats, outputs, step_summary))


@app.command()
@handle_errors
def report(
    report_path: Path = typer.Argument(..., metavar="REPORT.json", help="A report written by `evaluate -o`."),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    outputs: Optional[List[Path]] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    with_gate: bool = typer.Option(False, "--gate", help="Include gate results (config searched as for `gate`)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help=CONFIG_HELP + " Implies --gate."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help=BASELINE_HELP + " Implies --gate."),
    use_interval: Optional[bool] = typer.Option(None, "--use-interval/--point-estimate", help=INTERVAL_HELP, show_default=False),
) -> None:
    """Re-render a saved report (terminal, json, md, junit, html) without the model. Exits 0 even if the gate fails."""
    from macs_audit import gate as gate_core
    from macs_audit.report import load_report

    targets = resolve_outputs(formats, outputs)
    cfg = None
    if with_gate or config is not None or baseline is not None or use_interval is not None:
        cfg = gate_core.load_config(config)
    saved = load_report(report_path)
    result = None
    if cfg is not None:
        baseline_path = baseline if baseline is not None else cfg.baseline_report
        base = load_report(baseline_path) if baseline_path is not None else None
        result = gate_core.run_gate(saved, cfg, base, use_interval=use_interval,
                                    baseline_name=str(baseline_path) if baseline_path is not None else None)
    if result is None and any(name == "junit" for name, _ in targets):
        render_report("junit", saved, None)  # raises the UsageError that explains what to do
    emit(targets, lambda name: render_report(name, saved, result))


@app.command()
@handle_errors
def compare(
    a_path: Path = typer.Argument(..., metavar="A.json", help="The reference report (e.g. the main branch)."),
    b_path: Path = typer.Argument(..., metavar="B.json", help="The candidate report; deltas are B - A."),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help=FORMAT_HELP),
    outputs: Optional[List[Path]] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    step_summary: bool = typer.Option(True, "--step-summary/--no-step-summary", help=SUMMARY_HELP),
) -> None:
    """Compare two saved reports side by side; changes in the bad direction are highlighted. Exits 0."""
    from macs_audit.compare import compare as compare_reports
    from macs_audit.report import load_report
    from macs_audit.reports import markdown

    targets = resolve_outputs(formats, outputs)
    comparison = compare_reports(load_report(a_path), load_report(b_path), a_path.name, b_path.name)

    def render(name: str):
        from macs_audit.reports import html, json_report, junit, terminal

        return {"terminal": terminal.comparison_table, "json": json_report.render_comparison,
                "md": markdown.render_comparison, "junit": junit.render_comparison,
                "html": html.render_comparison}[name](comparison)

    emit(targets, render)
    if step_summary:
        append_step_summary(markdown.render_comparison(comparison))
