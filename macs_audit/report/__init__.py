"""The Report: typed sections with a versioned JSON form (docs/report-schema.md).

- `document`: the Report (the root of the sections), its JSON in and out, `load_report`;
- `sections`: the typed sections, a field per key the schema names;
- `reading`: the Section base class and the reader that checks every key against its field's type;
- `versions`: the schema version, which versions are read and what each added.

Every output format, the gate and `compare` read a Report, never the model; reading one imports no
models, torch or onnxruntime. The rest of the package imports these names from `macs_audit.report`.
"""

from macs_audit.report.document import DEFAULT_ROBUST_VIEW, Report, load_report
from macs_audit.report.reading import MAX_DEPTH, Keys, Length, Section, null_when_absent, within_depth
from macs_audit.report.sections import (
    CalibratorRow,
    Calibrators,
    Conformal,
    Conventions,
    CorruptionMeans,
    CorruptionSummary,
    DataInfo,
    DetectionScores,
    Estimate,
    FamilyMeans,
    MarginHistogram,
    ModelInfo,
    OODDetection,
    Pair,
    Parity,
    ParityView,
    RealLabels,
    Reliability,
    Robustness,
    Runtime,
    Sensitivity,
    SetMeans,
    SetStats,
    Settings,
    Shift,
    ShiftSetResult,
    Size,
    SmoothCurve,
    TemperatureFit,
    Tool,
    Unlabeled,
    ViewResult,
)
from macs_audit.report.versions import SCHEMA_VERSION, added_in

__all__ = [
    "DEFAULT_ROBUST_VIEW",
    "MAX_DEPTH",
    "SCHEMA_VERSION",
    "CalibratorRow",
    "Calibrators",
    "Conformal",
    "Conventions",
    "CorruptionMeans",
    "CorruptionSummary",
    "DataInfo",
    "DetectionScores",
    "Estimate",
    "FamilyMeans",
    "Keys",
    "Length",
    "MarginHistogram",
    "ModelInfo",
    "OODDetection",
    "Pair",
    "Parity",
    "ParityView",
    "Reliability",
    "Report",
    "Robustness",
    "Runtime",
    "Section",
    "Sensitivity",
    "Settings",
    "SetMeans",
    "SetStats",
    "RealLabels",
    "Shift",
    "ShiftSetResult",
    "Size",
    "SmoothCurve",
    "TemperatureFit",
    "Tool",
    "Unlabeled",
    "ViewResult",
    "added_in",
    "load_report",
    "null_when_absent",
    "within_depth",
]
