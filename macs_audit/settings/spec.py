"""The audit spec: a team's options for each command, written once, in `[tool.macs-audit.<command>]` of a
pyproject.toml or `[<command>]` of a macs-audit.toml (the file the gate's thresholds live in, found the same
way). Each table is validated against the options table (settings/table.py) with the gate config's one-line
errors: an unknown key names the closest one, a wrong type or a value out of range names the key and the file.
Relative paths in a spec are relative to the spec file's folder, so `macs-audit evaluate` runs the same audit
from any folder of the repository. A shared table (`[tool.macs-audit.mlflow]`) sets options of every command that
takes them, under its own keys (settings/table.py, Option.spec_table)."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from os import PathLike
from pathlib import Path
from typing import Any

from macs_audit.errors import UsageError
from macs_audit.gating.config import PYPROJECT_TOML, find_project_file, read_toml
from macs_audit.settings.table import BY_NAME, COMMANDS, SHARED_TABLES, Option, options_of

TOOL = "macs-audit"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A spec file read: its path, its SHA-256 and its tables by command (the gate's included, unread here)."""

    path: Path
    sha256: str
    tables: dict[str, dict[str, Any]]
    prefix: str = f"tool.{TOOL}."  # "" where the tables are at the top of the file (a macs-audit.toml)

    def where(self, command: str) -> str:
        """How messages name a command's table: 'pyproject.toml [tool.macs-audit.evaluate]'."""
        return f"{self.path} [{self.prefix}{command}]"

    def values(self, command: str) -> dict[str, Any]:
        """The validated values of `command`'s table (empty where the spec has none) and of the shared tables'
        keys of the options it takes (Option.spec_table: [mlflow] enabled sets `mlflow`): paths made absolute from
        the spec's folder, arrays of a repeatable option as lists, of a comma-list option joined."""
        options = [option for option in options_of(command) if option.in_spec]
        known = {option.name: option for option in options if option.spec_table is None}
        values: dict[str, Any] = {}
        for key, value, where in self._keys(command):
            elsewhere = BY_NAME.get(key)
            if elsewhere is not None and elsewhere.spec_table is not None:  # mlflow = true under [evaluate]
                table = f"[{self.prefix}{elsewhere.spec_table}]"
                raise UsageError(f"{key!r} in {where} is set in the spec's {table} table, as {elsewhere.spec_key}")
            values[key] = _value(key, value, known, where, self.path.parent)
        taken = {option.name for option in options}
        for shared in dict.fromkeys(option.spec_table for option in options if option.spec_table is not None):
            by_key = {o.spec_key: o for o in BY_NAME.values() if o.spec_table == shared}
            for key, value, where in self._keys(shared):
                option = by_key.get(key)
                if option is None:
                    raise unknown_key(key, by_key, where)
                if option.name in taken:  # checked as the option, its messages naming the key as the table spells it
                    named = dataclasses.replace(option.of(command), name=key)
                    values[option.name] = checked_value(named, value, f"in {where}", self.path.parent)
        return values

    def _keys(self, name: str) -> list[tuple[str, Any, str]]:
        """(key, value, where) of each key of table `name` (none where the spec has no such table)."""
        table = self.tables.get(name)
        if table is None:
            return []
        where = self.where(name)
        if not isinstance(table, dict):
            raise UsageError(f"{where} must be a table of options, got {type(table).__name__}")
        return [(key, value, where) for key, value in table.items()]


def _tables(doc: dict, path: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """The command tables of a parsed spec and their prefix: [tool.macs-audit.*] (any file), else the top-level
    tables of any file but a pyproject.toml (a macs-audit.toml, or the file --config names). A table that names
    no command and is no shared table (settings/table.py SHARED_TABLES) is an unknown key."""
    tool = doc.get("tool", {}).get(TOOL) if isinstance(doc.get("tool"), dict) else None
    if isinstance(tool, dict):
        tables, where, prefix = tool, f"{path} [tool.{TOOL}]", f"tool.{TOOL}."
    elif path.name != PYPROJECT_TOML:
        tables, where, prefix = doc, str(path), ""
    else:
        return {}, f"tool.{TOOL}."
    for key in tables:
        if key not in COMMANDS and key not in SHARED_TABLES:
            raise unknown_key(key, (*COMMANDS, *SHARED_TABLES), where)
    return tables, prefix


def read_spec(path: Path, *, needs_tables: bool = True) -> Spec:
    """Read the spec at `path`: UsageError (one line) for a file that is missing, not TOML, holds an unknown
    command table, or (`needs_tables`: a --config, which would change nothing) no table of macs-audit at all."""
    if not path.exists():
        raise UsageError(f"config not found: {path}")
    tables, prefix = _tables(read_toml(path), path)
    if not tables and needs_tables:
        raise UsageError(
            f"{path} holds no macs-audit table: [tool.{TOOL}.<command>] in a pyproject.toml, or [<command>] "
            "(evaluate, gate, ...) in a macs-audit.toml"
        )
    return Spec(path, hashlib.sha256(path.read_bytes()).hexdigest(), tables, prefix)


def find_spec(start: Path | None = None) -> Path | None:
    """The spec from `start` (default: the current directory) up, found as the gate config is: a macs-audit.toml,
    or a pyproject.toml with a [tool.macs-audit] table (the search stops at the project root or a .git folder)."""
    return find_project_file(start, lambda doc, _: isinstance(doc.get("tool"), dict) and TOOL in doc["tool"])


def load_spec(path: Path | None) -> Spec | None:
    """The spec at `path` (--config), else the one found from the current directory, else None."""
    if path is not None:
        return read_spec(Path(path))
    found = find_spec()
    return read_spec(found) if found is not None else None


def unknown_key(key: str, known, where: str) -> UsageError:
    close = difflib.get_close_matches(str(key), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see docs/options.md for the keys"
    return UsageError(f"unknown key {key!r} in {where}{hint}")


def _value(key: str, value: Any, known: dict[str, Option], where: str, folder: Path) -> Any:
    option = known.get(key)
    if option is None:
        if key in BY_NAME and not BY_NAME[key].in_spec:
            raise UsageError(f"{key!r} in {where} is for the command line only ({BY_NAME[key].flag})")
        raise unknown_key(key, known, where)
    return checked_value(option, value, f"in {where}", folder)


def checked_value(option: Option, value: Any, where: str, folder: Path | None = None) -> Any:
    """`value` of `option` as the spec or an API keyword gives it, checked as the flag's would be (its type, an
    int being a float; its range) and in the form the flag gives it: a list or table of a text option joined
    (corruptions = ["fog", "snow"], input_size = [224, 224], problem_bars = {ece = 0.05}), a number written out
    (input_size = 224). `where`: how a message places it ("in pyproject.toml [tool.macs-audit.evaluate]");
    `folder`: where a relative path is from (None: as given). UsageError, one line, naming the option."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, dict) and option.kind is str:  # shift_data = {a = "dir"}, problem_bars = {ece = 0.05}
        value = [f"{name}={_text(option, item, where)}" for name, item in value.items()]
        value = value if option.repeatable else ",".join(value)
    if option.repeatable:
        values = value if isinstance(value, list) else [value]
        return [_one(option, item, where, folder) for item in values]
    if isinstance(value, list) and option.kind is str:  # corruptions = ["fog", "snow"], input_size = [224, 224]
        return ",".join(_text(option, item, where) for item in value)
    return _one(option, value, where, folder)


def _text(option: Option, value: Any, where: str) -> str:
    """One item of a text option's list or table: a string, or a number written out (input_size = 224)."""
    if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return str(value)
    raise UsageError(f"{option.name} {where} must be text or numbers, got {value!r}")


def _one(option: Option, value: Any, where: str, folder: Path | None) -> Any:
    """One value of `option`, checked as the flag's would be: its type (an int is a float), its range."""
    kind = option.kind
    expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string", Path: "a path"}[kind]
    wrong = UsageError(f"{option.name} {where} must be {expected}, got {value!r}")
    if kind is bool:
        if not isinstance(value, bool):
            raise wrong
        return value
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and isinstance(value, float)):
            raise wrong
        low, high = option.minimum, option.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"at least {low:g}" if high is None else f"in [{low:g}, {high:g}]"
            raise UsageError(f"{option.name} {where} must be {bounds}, got {value!r}")
        return kind(value)
    if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # input_size = 224, severities = 3
    if kind is Path and isinstance(value, PathLike):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise wrong
    if folder is None:
        return Path(value) if kind is Path else value
    if kind is Path:
        return Path(value) if value.startswith("hf-hub:") else folder / value
    if option.named_path and "=" in value:  # shift_data = ["imagenet-a=data/imagenet-a"]: the folder's path
        name, _, path = value.partition("=")
        return f"{name}={folder / path}"
    return value
