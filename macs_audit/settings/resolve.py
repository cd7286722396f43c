"""A command's options resolved: each value from the flags (or the API's keywords), else the spec, else the
preset, else the table's default; and where each came from, for the report's `settings` record."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from macs_audit.errors import UsageError
from macs_audit.settings.presets import PRESETS
from macs_audit.settings.spec import Spec, unknown_key
from macs_audit.settings.table import DEFAULT, FLAG, PRESET, SPEC, options_of
from macs_audit.text import without_credentials


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Every option of `command` with its value and its source (FLAG, SPEC, PRESET or DEFAULT)."""

    command: str
    values: dict[str, Any]
    sources: dict[str, str]
    spec: Spec | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def given(self, name: str) -> bool:
        """Whether `name` was set by a flag, the spec or a preset, not left at its default."""
        return self.sources[name] != DEFAULT

    def record(self) -> dict[str, Any]:
        """The report's record of the run's settings: the spec file and its hash, the preset, and each option's
        value (paths as text; a URL without the user name and password it may carry, as --mlflow-tracking-uri's)
        and source. Options left at a default of None are omitted."""
        options = {
            name: {"value": _recorded(value), "source": self.sources[name]}
            for name, value in self.values.items()
            if value is not None or self.sources[name] != DEFAULT
        }
        return {
            "command": self.command,
            "spec": str(self.spec.path) if self.spec is not None else None,
            "spec_sha256": self.spec.sha256 if self.spec is not None else None,
            "preset": self.values.get("preset"),
            "options": options,
        }


def _recorded(value: Any) -> Any:
    """An option's value as the report records it: `_plain`, and text without a URL's credentials."""
    plain = _plain(value)
    return without_credentials(plain) if isinstance(plain, str) else plain


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def resolve(command: str, given: Mapping[str, Any], spec: Spec | None = None) -> Resolved:
    """`command`'s options: `given` (flags given on the command line, or the API's keywords; None values are not
    given) over the spec's table for `command` over the preset (named in `given` or the spec) over the defaults.
    UsageError for a keyword the command does not take (with the closest name), an unknown preset, or a required
    option none of them sets."""
    options = options_of(command)
    known = {option.name for option in options}
    for key in given:
        if key not in known:
            raise unknown_key(key, known, f"the options of {command}")
    flags = {key: value for key, value in given.items() if value is not None}
    from_spec = spec.values(command) if spec is not None else {}
    preset_name = flags.get("preset", from_spec.get("preset"))
    from_preset = preset(command, preset_name) if preset_name is not None else {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in options:
        for source, layer in ((FLAG, flags), (SPEC, from_spec), (PRESET, from_preset)):
            if option.name in layer:
                values[option.name], sources[option.name] = layer[option.name], source
                break
        else:
            values[option.name], sources[option.name] = option.default, DEFAULT
        if option.required and values[option.name] is None:  # after the spec, which may set it
            raise UsageError(f"give {option.flag}, or {option.name} in the spec's {command} table")
    return Resolved(command, values, sources, spec)


def preset(command: str, name: str) -> dict[str, Any]:
    """The values of `command`'s preset `name` (UsageError naming the presets there are)."""
    presets = PRESETS.get(command, {})
    if name not in presets:
        close = difflib.get_close_matches(str(name), list(presets), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(f"unknown preset {name!r} for {command}; {hint}presets: {', '.join(presets) or 'none'}")
    return presets[name]


def naming_the_spec(error: UsageError, resolved: Resolved) -> UsageError:
    """`error`, raised parsing a resolved value and naming its flag (--calibration-split must be ...), with where the
    value came from when the spec set it: the user typed no flag, so the message names the key and the file."""
    from macs_audit.settings.table import options_of

    message = str(error)
    if resolved.spec is None:
        return error
    for option in options_of(resolved.command):
        flags = [flag for spelling in option.flags for flag in spelling.split("/") if flag.startswith("--")]
        named = any(re.search(rf"{re.escape(flag)}(?![\w-])", message) for flag in flags)  # --data, not --data-format
        if named and resolved.sources.get(option.name) == SPEC:
            return UsageError(f"{message} (from {option.name} in {resolved.spec.where(resolved.command)})")
    return error
