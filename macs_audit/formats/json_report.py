"""JSON format: the Report's versioned schema (docs/report-schema.md), plus gate results if given.

The optional top-level "gate" object is an addition readers may ignore: Report.from_dict skips it,
so a gated report can be re-rendered or used as a baseline.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from macs_audit.report import Report

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult


def render(report: Report, gate: GateResult | None = None) -> str:
    data = report.to_dict()
    if gate is not None:
        data["gate"] = gate.to_dict()
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def render_comparison(comparison: Comparison) -> str:
    return json.dumps(comparison.to_dict(), indent=2, allow_nan=False) + "\n"
