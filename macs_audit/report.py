"""The Report: a plain dataclass tree with a versioned JSON form.

Every output format, the gate and `compare` read a Report, never the model. Values are fractions
(not percent). The schema is documented in docs/report-schema.md; bump SCHEMA_VERSION's minor
number for additions and its major number for changes that break readers.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from macs_audit.errors import InputError

SCHEMA_VERSION = "1.0"


@dataclasses.dataclass
class ViewResult:
    """Metrics of the model on one view of the data (clean, a perturbation, a corruption at a severity)."""

    name: str
    kind: str  # "clean" | "perturbation" | "corruption"
    metrics: dict[str, float]
    intervals: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    reliability: dict[str, list] | None = None
    corruption: str | None = None
    severity: int | None = None
    family: str | None = None


@dataclasses.dataclass
class Report:
    model: dict[str, Any]
    data: dict[str, Any]
    runtime: dict[str, Any]
    conventions: dict[str, Any]
    seeds: dict[str, int]
    clean: ViewResult
    temperature_scaling: dict[str, Any] | None = None
    margin_histogram: dict[str, list] | None = None
    views: list[ViewResult] = dataclasses.field(default_factory=list)
    robustness: dict[str, Any] | None = None
    corruption_summary: dict[str, Any] | None = None
    tool: dict[str, str] = dataclasses.field(default_factory=dict)
    created: str = ""
    schema_version: str = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        if not isinstance(data, dict) or "schema_version" not in data:
            raise InputError("not a macs-audit report (no schema_version)")
        major = str(data["schema_version"]).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise InputError(f"report schema {data['schema_version']} is not supported (this version reads {SCHEMA_VERSION})")
        fields = {f.name for f in dataclasses.fields(cls)}
        try:
            kwargs = {k: v for k, v in data.items() if k in fields}
            kwargs["clean"] = ViewResult(**data["clean"])
            kwargs["views"] = [ViewResult(**v) for v in data.get("views", [])]
            return cls(**kwargs)
        except (KeyError, TypeError) as exc:
            raise InputError(f"malformed macs-audit report: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> "Report":
        try:
            return cls.from_dict(json.loads(text))
        except ValueError as exc:
            raise InputError(f"report is not valid JSON: {exc}") from None


def load_report(path) -> Report:
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise InputError(f"report not found: {path}")
    return Report.from_json(path.read_text())
