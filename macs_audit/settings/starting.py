"""The evaluate table `macs-audit init` writes beside the gate's: the audit a report ran, as a spec, so that
`macs-audit evaluate` with no argument runs it again. Its keys are the options the report's `settings` record as
given by a flag or a spec (a preset's and the defaults follow from those; the outputs and the options of the command
line alone are left out); a report without that record gets the common keys commented out, to fill in."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from macs_audit.errors import UsageError
from macs_audit.report import Report
from macs_audit.settings.spec import Spec
from macs_audit.settings.table import FLAG, SPEC, options_of
from macs_audit.text import printable

COMMAND = "evaluate"
# Written commented out where the report records no settings: what a team sets first.
COMMON_KEYS: dict[str, Any] = {
    "model": "model.onnx",
    "data": "data/test.npz",
    "bootstrap": 1000,
    "calibration_split": 0.2,
    "perturbations": "noise+blur",
    "corruptions": "benchmark",
}


def spec_table_name(gate_table: str) -> str:
    """The evaluate table beside gate table `gate_table`: [evaluate] beside [gate], else [tool.macs-audit.evaluate]."""
    return gate_table.rpartition("gate")[0] + COMMAND


def starting_spec(report: Report, table: str, folder: Path, report_name: str = "the report") -> str:
    """The TOML text of evaluate table `table` from `report`'s settings, its paths as the spec written in the
    absolute `folder` reads them. A recorded value the spec would refuse is left out."""
    keys = _recorded(report, folder)
    lines = [
        printable(f"# Written by `macs-audit init` from {report_name}: the audit `macs-audit evaluate` runs with"),
        "# no argument (a flag given wins over a key here). Paths are relative to this file's folder;",
        "# docs/options.md lists every key.",
        f"[{table}]",
    ]
    if keys:
        lines += [f"{key} = {_toml(value)}" for key, value in keys.items()]
    else:
        lines += ["# The report records no settings: uncomment the keys to hold."]
        lines += [f"# {key} = {_toml(value)}" for key, value in COMMON_KEYS.items()]
    return "\n".join(lines) + "\n"


def _recorded(report: Report, folder: Path) -> dict[str, Any]:
    """The report's settings given by a flag or a spec, each one the spec takes (checked as the spec checks it)."""
    settings = report.settings
    if settings is None or settings.command != COMMAND:
        return {}
    settable = {option.name: option for option in options_of(COMMAND) if option.in_spec}
    keys: dict[str, Any] = {}
    for name, record in settings.options.items():
        option = settable.get(name)
        if option is None or not isinstance(record, dict) or record.get("source") not in (FLAG, SPEC):
            continue
        value = record.get("value")
        if option.kind is Path or option.named_path:
            value = _relative(value, folder, option.named_path)
        try:  # as the spec reads it: a report's value of the wrong type or out of range is not written
            Spec(folder / "spec.toml", "", {COMMAND: {name: value}}).values(COMMAND)
        except UsageError:
            continue
        keys[name] = value
    return keys


def _relative(value: Any, folder: Path, named: bool) -> Any:
    """A recorded path (`named`: NAME=PATH; or a list of them) as the spec in `folder` reads it: a path given
    relative to the folder the audit ran in (taken to be this one) from `folder`; an absolute one relative to
    `folder` where it lies under it, else as it is."""
    if isinstance(value, list):
        return [_relative(item, folder, named) for item in value]
    if not isinstance(value, str) or value.startswith("hf-hub:"):
        return value
    name, sep, path = value.partition("=") if named else ("", "", value)
    if not Path(path).is_absolute():
        path = Path(os.path.relpath(Path.cwd() / path, folder)).as_posix()
    elif Path(path).is_relative_to(folder):
        path = Path(path).relative_to(folder).as_posix()
    return f"{name}{sep}{path}"


def _toml(value: Any) -> str:
    """A TOML value: JSON's string escapes are TOML's, but for DEL, which TOML escapes and JSON does not."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value)).replace("\x7f", "\\u007f")
