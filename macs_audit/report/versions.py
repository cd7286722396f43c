"""The report's schema version (docs/report-schema.md, "Versioning policy"): which versions this one reads, the
top-level sections each minor version added, and the keys a major version renamed.

A report of the previous major version is still read, for one major version: each key it holds under a name
this version changed is read under the new name, with a one-line deprecation note the commands show, and a
report of that version saved again writes the old name (so it keeps its bytes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from macs_audit.errors import InputError

SCHEMA_VERSION = "3.4"
READ_MAJORS = (2, 3)  # 3.0 still reads 2.x (their renamed keys mapped); the next major version will not


def version(text: str) -> tuple[int, ...]:
    """`"2.1"` as (2, 1); (0, 0) for text that is not a version."""
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return (0, 0)


def added_in(since: str) -> Any:
    """An optional top-level section added by minor version `since` (see Report.to_dict)."""
    return dataclasses.field(default=None, metadata={"since": version(since)})


def check_supported(schema_version: str) -> None:
    """InputError unless a report of `schema_version` is one this version reads."""
    if version(schema_version)[0] not in READ_MAJORS:
        raise InputError(
            f"report schema {schema_version} is not supported (this version writes {SCHEMA_VERSION} and reads "
            f"{' and '.join(f'{major}.x' for major in READ_MAJORS)})"
        )


@dataclasses.dataclass(frozen=True)
class Renamed:
    """A key of a top-level section that schema `since` renamed: files older than it hold it as `old`."""

    section: str
    old: str
    new: str
    since: str

    def applies_to(self, schema_version: str) -> bool:
        return version(schema_version) < version(self.since)


RENAMED = (
    # The relative and unnormalised mean Corruption Error, named so that neither reads as the Maximum
    # Calibration Error every view's metrics call `mce`. (2.0 renamed the mean Corruption Error itself, `mce`
    # in 1.x; 1.x is no longer read, and no 2.x report holds `mce` in its corruption summary.)
    Renamed("corruption_summary", "relative_mce", "relative_mean_corruption_error", since="3.0"),
    Renamed("corruption_summary", "mce_unnormalized", "mean_corruption_error_unnormalized", since="3.0"),
)


def _with_key(section: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """`section` with key `old` named `new`, in its place."""
    return {new if key == old else key: value for key, value in section.items()}


def read_renamed(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A report's top-level object with the keys its (older) version names differently under this version's
    names (a copy where any is; `data` is not changed), and a deprecation note for each."""
    notes = []
    schema_version = str(data.get("schema_version"))
    for rename in RENAMED:
        section = data.get(rename.section)
        if not rename.applies_to(schema_version) or not isinstance(section, dict) or rename.old not in section:
            continue
        if rename.new in section:  # not a key of that version: left as the unknown key it is
            continue
        data = {**data, rename.section: _with_key(section, rename.old, rename.new)}
        notes.append(
            f"{rename.section}.{rename.old} of a schema {schema_version} report is deprecated: read as "
            f"{rename.section}.{rename.new}, its name since schema {rename.since} (evaluate writes it; the next "
            "major version will not read the old name)"
        )
    return data, notes


def write_renamed(data: dict[str, Any], schema_version: str) -> dict[str, Any]:
    """A report's top-level object with the keys renamed since `schema_version` written under their old names:
    a report of an older version, loaded and saved again, keeps its bytes."""
    for rename in RENAMED:
        section = data.get(rename.section)
        if rename.applies_to(schema_version) and isinstance(section, dict) and rename.new in section:
            data = {**data, rename.section: _with_key(section, rename.new, rename.old)}
    return data
