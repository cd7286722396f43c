"""macs-audit: audit image classifiers for calibration and robustness, and fix them.

The Python API (docs/api.md) is macs_audit.api's, served here and loaded on the first use of one of its names:
`import macs_audit` stays light (no torch, no output formats), as the CLI's start needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from macs_audit.version import __version__

if TYPE_CHECKING:
    from macs_audit.api import (
        GateResult,
        InputError,
        MacsAuditError,
        OutputError,
        Report,
        UsageError,
        apply_calibration,
        audit,
        audit_predictions,
        calibrate,
        calibrate_predictions,
        gate,
        load_report,
    )

__all__ = [
    "GateResult",
    "InputError",
    "MacsAuditError",
    "OutputError",
    "Report",
    "UsageError",
    "__version__",
    "apply_calibration",
    "audit",
    "audit_predictions",
    "calibrate",
    "calibrate_predictions",
    "gate",
    "load_report",
]


def __getattr__(name: str) -> Any:
    """An API name, from macs_audit.api on first use (a module attribute Python looks up only when missing)."""
    if name in __all__ and name != "__version__":
        from macs_audit import api

        value = getattr(api, name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module 'macs_audit' has no attribute {name!r}")
