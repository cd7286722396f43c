"""The options of the commands that write or read reports: where reports go (--format, --output) and the
gate's (--config, --baseline, --use-interval, --step-summary): one declaration, one help text each, shared by
evaluate, gate, report and compare. Apart from cli/options.py, whose parsers reach the audit and the models:
gate, report and compare never import them (pyproject's import contract). cli/output.py routes the formats."""

from __future__ import annotations

import typer

from macs_audit.formats import EXTENSIONS, FORMATS
from macs_audit.text import or_list


def _first_extensions() -> str:
    """Each format's first extension in EXTENSIONS, as --output's help lists them: '.json .md .xml .html .txt'."""
    first: dict[str, str] = {}
    for extension, name in EXTENSIONS.items():
        first.setdefault(name, extension)
    return " ".join(first.values())


FORMAT_HELP = f"Output format: {or_list(FORMATS)}. Repeatable."
OUTPUT_HELP = (
    "Write to this file (atomically) instead of stdout. Repeatable: pairs with --format in order, "
    f"or the extension ({_first_extensions()}) names the format."
)
SUMMARY_HELP = "Append the Markdown to $GITHUB_STEP_SUMMARY when that is set."
CONFIG_HELP = (
    "Gate thresholds: a macs-audit.toml ([gate]) or pyproject.toml ([tool.macs-audit.gate]). "
    "Default: searched from the current directory."
)
BASELINE_HELP = "Baseline report for the [gate.baseline] regression checks."
INTERVAL_HELP = "Gate on the pessimistic end of the 95% bootstrap interval (default: the config's use_interval)."


REPORT_FORMAT_HELP = (
    "Format of the report: json (what gate, report and compare read), html, md or terminal. Repeatable: pairs "
    "with --output in order; without --output, to stdout. Default: --output's extension (.html, .md, .txt), "
    "else json."
)
REPORT_OUTPUT_HELP = (
    "Write the report to this file (atomically); '-' is stdout (the tables then go to stderr). Repeatable: one "
    "file per format, e.g. -o audit.json -o audit.html."
)
# One declaration each, shared by the commands that write reports (evaluate, gate, report); the help differs.
FORMAT_OPTION = typer.Option(None, "--format", "-f", help=FORMAT_HELP)
OUTPUT_OPTION = typer.Option(None, "--output", "-o", readable=False, help=OUTPUT_HELP)
REPORT_FORMAT_OPTION = typer.Option(None, "--format", "-f", help=REPORT_FORMAT_HELP)
REPORT_OUTPUT_OPTION = typer.Option(None, "--output", "-o", readable=False, help=REPORT_OUTPUT_HELP)
