"""Output formats, one module each, every one with

    render(report, gate=None) -> str         a Report, with gate results if given
    render_comparison(comparison) -> str     a `compare` Comparison

FORMATS names them; a module is imported on first use (html pulls in matplotlib). Formats read the
Report and the metric registry only: never a model, torch or onnxruntime. The terminal module also
has rich renderables for the console (`renderable`, `comparison_table`, `gate_table`).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from macs_audit.errors import UsageError

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult
    from macs_audit.report import Report

FORMATS: dict[str, str] = {
    "terminal": "macs_audit.formats.terminal",
    "json": "macs_audit.formats.json_report",
    "md": "macs_audit.formats.markdown",
    "junit": "macs_audit.formats.junit",
    "html": "macs_audit.formats.html",
    # A Hugging Face README.md (huggingface_hub, the `hf` extra); no extension names it: .md is Markdown's.
    "model-card": "macs_audit.formats.model_card",
    # A pull request's comment: the gate's verdict and values (action.yml posts it); no extension names it.
    "pr-comment": "macs_audit.formats.pr_comment",
}
# The formats that list the gate's checks: without gate results they have nothing to say (a UsageError).
GATE_FORMATS = ("junit", "pr-comment")
# Other names a user may type for a format, and the file extensions that name one (`--output` alone).
ALIASES = {"markdown": "md", "xml": "junit", "txt": "terminal", "text": "terminal"}
EXTENSIONS = {
    ".json": "json",
    ".md": "md",
    ".markdown": "md",
    ".xml": "junit",
    ".html": "html",
    ".htm": "html",
    ".txt": "terminal",
}


def canonical(name: str) -> str:
    """The registry's name of a format as a user typed it (any case, or one of ALIASES); not checked."""
    return ALIASES.get(name.lower(), name.lower())


def format_module(name: str) -> ModuleType:
    if name not in FORMATS:
        raise UsageError(f"unknown format {name!r}; choose from {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[name])


def render(name: str, report: Report, gate: GateResult | None = None) -> str:
    text: str = format_module(name).render(report, gate)
    return text


def render_comparison(name: str, comparison: Comparison) -> str:
    text: str = format_module(name).render_comparison(comparison)
    return text
