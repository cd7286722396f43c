"""The CI gate: thresholds from TOML -> one pass/fail Check per threshold. Torch-free: it reads saved reports.

- `config`: where the thresholds live ([tool.macs-audit.gate] of a pyproject.toml, [gate] of a
  macs-audit.toml), finding that file, and checking every key and value (UsageError, exit 2);
- `checks`: reading a metric from a Report, and the checks of a Report (and a baseline Report)
  against a GateConfig (InputError, exit 3, where the report lacks a gated metric); ConfiguredGate,
  the config file and baseline report the commands gate with;
- `thresholds`: the starting table `macs-audit init` writes from a report.

docs/gate.md lists every key. The rest of the package imports these names from `macs_audit.gating`.
"""

from macs_audit.gating.checks import Check, ConfiguredGate, GateResult, locate, observe, run_gate
from macs_audit.gating.config import (
    ABSOLUTE_KEYS,
    BASELINE_KEYS,
    CORRUPTION_KEYS,
    MACS_AUDIT_TOML,
    PYPROJECT_TOML,
    TOOL_TABLE,
    GateConfig,
    find_config,
    load_config,
    parse_config,
)
from macs_audit.gating.thresholds import StartingThreshold, starting_config, starting_thresholds, write_starting_config

__all__ = [
    "ABSOLUTE_KEYS",
    "BASELINE_KEYS",
    "CORRUPTION_KEYS",
    "MACS_AUDIT_TOML",
    "PYPROJECT_TOML",
    "TOOL_TABLE",
    "Check",
    "ConfiguredGate",
    "GateConfig",
    "GateResult",
    "StartingThreshold",
    "find_config",
    "load_config",
    "locate",
    "observe",
    "parse_config",
    "run_gate",
    "starting_config",
    "starting_thresholds",
    "write_starting_config",
]
