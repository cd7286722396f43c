"""The gate's configuration: the TOML file it is read from, its keys, and every check of their values.

Thresholds live in `[tool.macs-audit.gate]` of a pyproject.toml or in `[gate]` of a
macs-audit.toml (docs/gate.md lists every key). Unknown keys and wrong types raise UsageError
(exit 2), with the closest known key where one is close; percent-style thresholds are fractions in
[0, 1]. A key renamed with the metric it checks is still read as its new name, for one major version of
the report schema, with a deprecation note in GateConfig.notes. What the keys check: macs_audit.gating.checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from macs_audit.errors import UsageError
from macs_audit.metrics.metric_row import Metric
from macs_audit.metrics.registry import GATE_METRICS, METRICS, VIEW_METRICS
from macs_audit.report import MAX_DEPTH, within_depth
from macs_audit.views.corruptions.table import CORRUPTIONS

# The two files a gate table lives in, by name: a macs-audit.toml holds [gate], a pyproject.toml (or any
# other TOML file) [tool.macs-audit.gate].
MACS_AUDIT_TOML = "macs-audit.toml"
PYPROJECT_TOML = "pyproject.toml"
GATE_TABLE = "gate"
TOOL_TABLE = "tool.macs-audit.gate"


def table_name(path: Path) -> str:
    """The gate table a file named like `path` holds: [gate] in a macs-audit.toml, else [tool.macs-audit.gate]."""
    return GATE_TABLE if path.name == MACS_AUDIT_TOML else TOOL_TABLE


def bound_key(m: Metric) -> str:
    """The key of a threshold on `m`, in its good direction: max_ece, min_accuracy."""
    return ("min_" if m.higher_is_better else "max_") + m.name


ABSOLUTE_KEYS = {bound_key(m): m.name for m in GATE_METRICS.values()}
# Per-corruption thresholds, on the means over severities in report.corruption_summary.corruptions.
CORRUPTION_KEYS = {bound_key(METRICS[name]): name for name in VIEW_METRICS}
# Per-set thresholds of the natural-shift sets ([gate.shift.<name>]), on each set's restricted view.
SHIFT_KEYS = {bound_key(METRICS[name]): name for name in VIEW_METRICS}
BASELINE_KEYS: dict[str, tuple[str, bool]] = {}  # key -> (metric, relative?)
for _m in GATE_METRICS.values():
    for _relative in (False, True):
        _key = f"max_{_m.name}_{'drop' if _m.higher_is_better else 'increase'}" + ("_relative" if _relative else "")
        BASELINE_KEYS[_key] = (_m.name, _relative)
# Gate metrics renamed with the report key they read (corruption_mce with report schema 2.0, relative_mce
# with 3.0), old name -> new: their old keys (max_corruption_mce, max_relative_mce;
# baseline.max_corruption_mce_increase, and _relative, the same for relative_mce) are read as the new ones,
# with a note.
RENAMED_METRICS = {"corruption_mce": "mean_corruption_error", "relative_mce": "relative_mean_corruption_error"}
RENAMED_IN = {"corruption_mce": "2.0", "relative_mce": "3.0"}  # the report schema that renamed each
DEPRECATED_KEYS: dict[str, str] = {}  # old key -> new key, at the top of the gate table
DEPRECATED_BASELINE_KEYS: dict[str, str] = {}  # the same in [gate.baseline]
DEPRECATED_SINCE: dict[str, str] = {}  # new key -> the report schema that renamed it
for _old, _new in RENAMED_METRICS.items():
    DEPRECATED_KEYS[bound_key(METRICS[_new]).replace(_new, _old, 1)] = bound_key(METRICS[_new])
    DEPRECATED_SINCE[bound_key(METRICS[_new])] = RENAMED_IN[_old]
    for _key, (_name, _) in BASELINE_KEYS.items():
        if _name == _new:
            DEPRECATED_BASELINE_KEYS[_key.replace(_new, _old, 1)] = _key
            DEPRECATED_SINCE[_key] = RENAMED_IN[_old]
GATE_OPTIONS = ("use_interval",)
GATE_TABLES = ("corruptions", "baseline", "shift", "parity", "slices")
BASELINE_OPTIONS = ("report",)
# Deployment parity ([gate.parity], every view of the report's parity section; [gate.parity.<view>] for one):
# key -> whether it bounds from below. Fractions, on the candidate - reference changes (auditing/parity.py).
PARITY_KEYS = {"min_agreement": True, "max_ece_increase": False, "max_nll_increase": False, "max_coverage_drop": False}
# The report's slices ([gate.slices], gating/checks.py's _slice_checks): key -> whether it bounds from below. Fractions.
SLICE_KEYS = {
    "min_slice_accuracy": True,  # every scored slice's accuracy
    "max_slice_ece": False,  # every scored slice's ECE
    "max_slice_accuracy_gap": False,  # the largest accuracy shortfall (rest - slice) among the significant gaps
    "max_multicalibration_error": False,  # the section's multicalibration error
}
SLICE_OPTIONS = ("min_size",)  # the smallest slice the keys apply to (default: the report's min_size)


@dataclasses.dataclass
class GateConfig:
    """Validated gate configuration (thresholds in config-file order)."""

    thresholds: dict[str, float] = dataclasses.field(default_factory=dict)  # "max_ece" -> 0.05
    corruption_defaults: dict[str, float] = dataclasses.field(default_factory=dict)  # "min_accuracy" -> 0.5
    corruption_overrides: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # "fog" -> {...}
    baseline: dict[str, float] = dataclasses.field(default_factory=dict)  # "max_ece_increase" -> 0.01
    shift_overrides: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # "imagenet-a" -> {...}
    parity_defaults: dict[str, float] = dataclasses.field(default_factory=dict)  # "min_agreement" -> 0.99
    parity_overrides: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # "fog@3" -> {...}
    slices: dict[str, float] = dataclasses.field(default_factory=dict)  # "min_slice_accuracy" -> 0.6
    slice_min_size: int | None = None  # [gate.slices] min_size; None: the report's
    baseline_report: Path | None = None
    use_interval: bool = False
    source: str = "<config>"
    notes: list[str] = dataclasses.field(default_factory=list)  # deprecated keys read, for the commands to show

    @property
    def checks_report_alone(self) -> bool:
        """Whether it sets a threshold checked without a baseline report (anything but [gate.baseline])."""
        return any(
            (
                self.thresholds,
                self.corruption_defaults,
                self.corruption_overrides,
                self.shift_overrides,
                self.parity_defaults,
                self.parity_overrides,
                self.slices,
            )
        )


def _short(value: Any) -> str:
    """A config value as a message quotes it: repr, shortened (a nested array shows its first levels)."""
    return reprlib.repr(value)


def read_toml(path: Path) -> dict:
    """Parse a TOML file (a regular file: a FIFO or a device is never read). Raises UsageError naming `path`."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    too_deep = UsageError(f"{path} cannot be used: arrays or tables nested more than {MAX_DEPTH} levels deep")
    if not path.is_file():
        raise UsageError(f"cannot read {path}: not a regular file")
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except RecursionError:  # tomllib parses nested arrays recursively
        raise too_deep from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"cannot read gate config {path}: {exc.strerror}") from None
    if not within_depth(doc, MAX_DEPTH):
        raise too_deep
    return doc


def gate_table(doc: dict, path: Path) -> tuple[dict | None, str]:
    """The gate table of a parsed file: [tool.macs-audit.gate] (any file) or [gate] (macs-audit.toml)."""
    tool = doc.get("tool", {}).get("macs-audit") if isinstance(doc.get("tool"), dict) else None
    if isinstance(tool, dict) and "gate" in tool:
        return tool["gate"], f"{path} [{TOOL_TABLE}]"
    if GATE_TABLE in doc:
        return doc[GATE_TABLE], f"{path} [{GATE_TABLE}]"
    return None, str(path)


def find_config(start: Path | None = None) -> Path | None:
    """Search `start` and its parents for macs-audit.toml or a pyproject.toml with a gate table.

    The search stops at the first pyproject.toml (the project root) or a .git directory.
    """
    return find_project_file(start, lambda doc, path: gate_table(doc, path)[0] is not None)


def find_project_file(start: Path | None, has_table: Callable[[dict, Path], bool]) -> Path | None:
    """The first macs-audit.toml from `start` (default: the current directory) up, or the first pyproject.toml
    where `has_table(its parsed document, its path)`; the search stops at the first pyproject.toml (the project
    root) or a .git folder. The one search of the files a team's settings live in (the gate's, the spec's)."""
    directory = (start or Path.cwd()).resolve()
    for folder in (directory, *directory.parents):
        if (folder / MACS_AUDIT_TOML).is_file():
            return folder / MACS_AUDIT_TOML
        pyproject = folder / PYPROJECT_TOML
        if pyproject.is_file():
            return pyproject if has_table(read_toml(pyproject), pyproject) else None
        if (folder / ".git").exists():
            return None
    return None


def _unknown_key(key: str, known, where: str) -> UsageError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see docs/gate.md for the keys"
    return UsageError(f"unknown key {key!r} in {where}{hint}")


def _number(value: Any, where: str, non_negative: bool = False) -> float:
    # bool is an int in Python; `max_ece = true` is a mistake, not 1.0.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where} must be a finite number, got {type(value).__name__} {_short(value)}")
    if non_negative and value < 0:
        raise UsageError(f"{where} must be >= 0, got {value!r}")
    return float(value)


def _fraction(value: float, metric: Metric, where: str) -> float:
    """Percent-style metrics are fractions in [0, 1]: `max_ece = 5` almost surely meant 5%."""
    return _unit_fraction(value, where) if metric.unit.bounded else value


def _unit_fraction(value: float, where: str) -> float:
    if not 0 <= value <= 1:
        raise UsageError(
            f"{where} = {value:g} is outside [0, 1]: thresholds are fractions ({value / 100:g} for {value:g}%)"
        )
    return value


def _table(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise UsageError(f"{where} must be a table, got {type(value).__name__} {_short(value)}")
    return value


def _renamed_key(key: str, renamed: dict[str, str], table: dict, cfg: GateConfig, where: str) -> str:
    """The key a deprecated `key` of `table` is read as, with its note in `cfg.notes`."""
    new = renamed[key]
    if new in table:
        raise UsageError(
            f"{where} sets both {key} and {new}, the same threshold under its old and new name; keep {new}"
        )
    cfg.notes.append(
        f"{where}: {key} is deprecated: read as {new}, its name since report schema {DEPRECATED_SINCE[new]} "
        "(rename it; the next major version will not read the old name)"
    )
    return new


def parse_config(table: dict, source: str = "<config>", base_dir: Path | None = None) -> GateConfig:
    """Validate a gate table (the contents of [tool.macs-audit.gate]) into a GateConfig."""
    cfg = GateConfig(source=source)
    _table(table, source)
    for key, value in table.items():
        where = f"{source}: {key}"
        if key in DEPRECATED_KEYS:
            key = _renamed_key(key, DEPRECATED_KEYS, table, cfg, source)
        if key == "use_interval":
            if not isinstance(value, bool):
                raise UsageError(f"{where} must be true or false, got {type(value).__name__} {_short(value)}")
            cfg.use_interval = value
        elif key in ABSOLUTE_KEYS:
            cfg.thresholds[key] = _fraction(_number(value, where), METRICS[ABSOLUTE_KEYS[key]], where)
        elif key == "corruptions":
            _parse_corruptions(_table(value, where), cfg, f"{source}: corruptions")
        elif key == "shift":
            _parse_shift(_table(value, where), cfg, f"{source}: shift")
        elif key == "parity":
            _parse_parity(_table(value, where), cfg, f"{source}: parity")
        elif key == "slices":
            _parse_slices(_table(value, where), cfg, f"{source}: slices")
        elif key == "baseline":
            _parse_baseline(_table(value, where), cfg, f"{source}: baseline", base_dir)
        else:
            raise _unknown_key(key, [*ABSOLUTE_KEYS, *GATE_OPTIONS, *GATE_TABLES], source)
    if not (cfg.checks_report_alone or cfg.baseline):
        raise UsageError(f"{source} sets no thresholds; a gate with no checks would always pass (see docs/gate.md)")
    return cfg


def _parse_corruptions(table: dict, cfg: GateConfig, where: str) -> None:
    known_names = CORRUPTIONS
    for key, value in table.items():
        if isinstance(value, dict):  # [gate.corruptions.<name>]: overrides for one corruption
            if key not in known_names:
                raise _unknown_key(key, [*known_names, *CORRUPTION_KEYS], where)
            overrides = {}
            for sub, bound in value.items():
                if sub not in CORRUPTION_KEYS:
                    raise _unknown_key(sub, CORRUPTION_KEYS, f"{where}.{key}")
                sub_where = f"{where}.{key}: {sub}"
                overrides[sub] = _fraction(_number(bound, sub_where), METRICS[CORRUPTION_KEYS[sub]], sub_where)
            if not overrides:
                raise UsageError(f"{where}.{key} is empty; give at least one of {', '.join(CORRUPTION_KEYS)}")
            cfg.corruption_overrides[key] = overrides
        elif key in CORRUPTION_KEYS:
            cfg.corruption_defaults[key] = _fraction(
                _number(value, f"{where}: {key}"), METRICS[CORRUPTION_KEYS[key]], f"{where}: {key}"
            )
        elif key in known_names:
            raise UsageError(f"{where}: {key} must be a table, e.g. [...gate.corruptions.{key}] min_accuracy = 0.5")
        else:
            raise _unknown_key(key, [*CORRUPTION_KEYS, *known_names], where)


def _parse_shift(table: dict, cfg: GateConfig, where: str) -> None:
    """[gate.shift.<set>]: thresholds on one --shift-data set's restricted view (min_accuracy, max_ece, ...)."""
    for name, value in table.items():
        if not isinstance(value, dict):
            raise UsageError(f"{where}: {name} must be a table, e.g. [...gate.shift.{name}] min_accuracy = 0.3")
        bounds = {}
        for key, bound in value.items():
            if key not in SHIFT_KEYS:
                raise _unknown_key(key, SHIFT_KEYS, f"{where}.{name}")
            bounds[key] = _fraction(_number(bound, f"{where}.{name}: {key}"), METRICS[SHIFT_KEYS[key]], where)
        if not bounds:
            raise UsageError(f"{where}.{name} is empty; give at least one of {', '.join(SHIFT_KEYS)}")
        cfg.shift_overrides[name] = bounds


def _parity_bound(value: Any, key: str, where: str) -> float:
    bound = _number(value, where, non_negative=True)
    if key != "max_nll_increase" and bound > 1:  # NLL is in nats; the others are fractions
        raise UsageError(f"{where} = {bound:g} is outside [0, 1]: {key} is a fraction ({bound / 100:g} for {bound:g}%)")
    return bound


def _parse_parity(table: dict, cfg: GateConfig, where: str) -> None:
    """[gate.parity]: PARITY_KEYS for every view of the parity section; [gate.parity.<view>] for one view."""
    for key, value in table.items():
        if isinstance(value, dict):
            overrides = {}
            for sub, bound in value.items():
                if sub not in PARITY_KEYS:
                    raise _unknown_key(sub, PARITY_KEYS, f"{where}.{key}")
                overrides[sub] = _parity_bound(bound, sub, f"{where}.{key}: {sub}")
            if not overrides:
                raise UsageError(f"{where}.{key} is empty; give at least one of {', '.join(PARITY_KEYS)}")
            cfg.parity_overrides[key] = overrides
        elif key in PARITY_KEYS:
            cfg.parity_defaults[key] = _parity_bound(value, key, f"{where}: {key}")
        else:
            raise _unknown_key(key, PARITY_KEYS, where)


def _parse_slices(table: dict, cfg: GateConfig, where: str) -> None:
    """[gate.slices]: SLICE_KEYS (fractions) over the report's scored slices, and the smallest slice they apply to."""
    for key, value in table.items():
        if key == "min_size":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(
                    f"{where}: min_size must be a whole number of images >= 1, "
                    f"got {type(value).__name__} {_short(value)}"
                )
            cfg.slice_min_size = value
        elif key in SLICE_KEYS:
            cfg.slices[key] = _unit_fraction(_number(value, f"{where}: {key}"), f"{where}: {key}")
        else:
            raise _unknown_key(key, [*SLICE_KEYS, *SLICE_OPTIONS], where)
    if not cfg.slices:
        raise UsageError(f"{where} sets no threshold; give at least one of {', '.join(SLICE_KEYS)}")


def _parse_baseline(table: dict, cfg: GateConfig, where: str, base_dir: Path | None) -> None:
    for key, value in table.items():
        if key in DEPRECATED_BASELINE_KEYS:
            key = _renamed_key(key, DEPRECATED_BASELINE_KEYS, table, cfg, where)
        if key == "report":
            if not isinstance(value, str) or not value:
                raise UsageError(f"{where}: report must be a path string, got {type(value).__name__} {_short(value)}")
            cfg.baseline_report = (base_dir or Path.cwd()) / value
        elif key in BASELINE_KEYS:
            name, relative = BASELINE_KEYS[key]
            allowance = _number(value, f"{where}: {key}", non_negative=True)
            cfg.baseline[key] = allowance if relative else _fraction(allowance, METRICS[name], f"{where}: {key}")
        else:
            raise _unknown_key(key, [*BASELINE_KEYS, *BASELINE_OPTIONS], where)


def config_path(path: Path | None = None, start: Path | None = None) -> Path:
    """The gate config to read: `path`, else the one found from `start` (default: the cwd); UsageError if none."""
    if path is not None:
        return Path(path)
    found = find_config(start)
    if found is None:
        raise UsageError(
            "no gate thresholds found: add [tool.macs-audit.gate] to pyproject.toml or pass "
            "--config macs-audit.toml, or start from a report's values with `macs-audit init REPORT.json` "
            "(see docs/gate.md)"
        )
    return found


def load_config(path: Path | None = None, start: Path | None = None) -> GateConfig:
    """Read and validate the gate config at `path`, or find one from `start` (default: the cwd)."""
    path = config_path(path, start)
    if not path.is_file():
        raise UsageError(f"gate config not found: {path}")
    table, source = gate_table(read_toml(path), path)
    if table is None:
        raise UsageError(f"{path} has no [tool.macs-audit.gate] table (or [gate] in a macs-audit.toml)")
    return parse_config(table, source, base_dir=path.parent)
