"""The Report: the root of the typed sections, its versioned JSON in and out, and `load_report`.

Every output format, the gate and `compare` read a Report, never the model. Bump SCHEMA_VERSION
(macs_audit.report.versions) for additions (minor) and for changes that break readers (major).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError
from macs_audit.report.reading import expected, field_types, parse_json, plain, read_value, required
from macs_audit.report.sections import (
    Calibrators,
    Conformal,
    Conventions,
    CorruptionSummary,
    DataInfo,
    MarginHistogram,
    ModelInfo,
    OODDetection,
    Parity,
    RealLabels,
    RepresentationShift,
    Robustness,
    Runtime,
    Settings,
    Shift,
    Slices,
    TemperatureFit,
    Tool,
    Unlabeled,
    ViewResult,
)
from macs_audit.report.versions import SCHEMA_VERSION, added_in, check_supported, read_renamed, version, write_renamed

DEFAULT_ROBUST_VIEW = "noise+blur"  # the view robustness.robust_accuracy is measured on


@dataclasses.dataclass
class Report:
    model: ModelInfo
    data: DataInfo
    runtime: Runtime
    conventions: Conventions
    seeds: dict[str, int]  # purpose -> seed
    clean: ViewResult
    temperature_scaling: TemperatureFit | None = None
    calibrators: Calibrators | None = added_in("1.2")
    margin_histogram: MarginHistogram | None = None
    views: list[ViewResult] = dataclasses.field(default_factory=list)
    robustness: Robustness | None = None
    corruption_summary: CorruptionSummary | None = None
    conformal: Conformal | None = added_in("1.2")
    ood: OODDetection | None = added_in("1.2")
    unlabeled: Unlabeled | None = added_in("1.2")
    shift: Shift | None = added_in("3.0")
    real_labels: RealLabels | None = added_in("3.0")
    parity: Parity | None = added_in("3.0")
    settings: Settings | None = added_in("3.2")
    representation_shift: RepresentationShift | None = added_in("3.3")
    slices: Slices | None = added_in("3.4")
    tool: Tool = dataclasses.field(default_factory=Tool)
    created: str = ""
    schema_version: str = SCHEMA_VERSION
    # Not part of the JSON: what reading an older report mapped (a deprecated key's note), for the commands
    # to show (the core never prints).
    deprecations: list[str] = dataclasses.field(
        default_factory=list, repr=False, compare=False, metadata={"written": False}
    )

    def view(self, name: str) -> ViewResult | None:
        return next((v for v in self.views if v.name == name), None)

    def views_of(self, kind: str) -> list[ViewResult]:
        return [v for v in self.views if v.kind == kind]

    def robust_view_name(self) -> str:
        if self.robustness is not None and self.robustness.robust_view:
            return self.robustness.robust_view
        return DEFAULT_ROBUST_VIEW

    def robust_view(self) -> ViewResult | None:
        """The perturbation view robust accuracy is measured on, if it ran."""
        name = self.robust_view_name()
        return next((v for v in self.views if v.name == name and v.kind == "perturbation"), None)

    def to_dict(self) -> dict[str, Any]:
        # Optional sections are written as null, never left out; but a report of an older minor version,
        # loaded and saved again, gets no null for a section added after it (and so keeps its bytes).
        # A report of an older version also keeps the names it gave keys renamed since.
        written = version(self.schema_version)
        data = {
            f.name: plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.metadata.get("written", True)
            and (getattr(self, f.name) is not None or written >= f.metadata.get("since", (0, 0)))
        }
        return write_renamed(data, self.schema_version)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read a report of a schema version this one reads (versions.READ_MAJORS), every key the schema names
        checked against its type (InputError naming the JSON path of the first that does not fit); top-level
        keys it does not name (a `gate`) are ignored. An older report's renamed keys are read under their new
        names, each with a note in `deprecations`."""
        if not isinstance(data, dict) or "schema_version" not in data:
            raise InputError("not a macs-audit report (no schema_version)")
        schema_version = data["schema_version"]
        if not isinstance(schema_version, str):
            raise expected("schema_version", str, schema_version)
        check_supported(schema_version)
        data, deprecations = read_renamed(data)
        kwargs: dict[str, Any] = {"deprecations": deprecations}
        for field in dataclasses.fields(cls):
            if not field.metadata.get("written", True):
                continue
            if field.name in data:
                kwargs[field.name] = read_value(data[field.name], field_types(cls)[field.name], field.name)
            elif required(field):
                raise InputError(f"{field.name}: missing (a required key)")
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Parse and read a report (see from_dict). Strict JSON: no NaN or Infinity, at most MAX_DEPTH levels."""
        return cls.from_dict(parse_json(text))


def load_report(path: str | Path) -> Report:
    """Read the report at `path`; InputError (naming the file) where it is not one this version reads. The
    notes in `deprecations` name the file too."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"report not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not a macs-audit report: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"cannot read report {path}: {exc.strerror}") from None
    try:
        report = Report.from_json(text)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    report.deprecations = [f"{path}: {note}" for note in report.deprecations]
    return report
