"""The report's schema version (docs/report-schema.md, "Versioning policy"): which versions this one reads,
and the top-level sections each minor version added.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from macs_audit.errors import InputError

SCHEMA_VERSION = "1.2"


def version(text: str) -> tuple[int, ...]:
    """`"1.2"` as (1, 2); (0, 0) for text that is not a version."""
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return (0, 0)


def added_in(since: str) -> Any:
    """An optional top-level section added by minor version `since` (see Report.to_dict)."""
    return dataclasses.field(default=None, metadata={"since": version(since)})


def check_supported(schema_version: str) -> None:
    """InputError unless a report of `schema_version` is one this version reads (the same major version)."""
    if schema_version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise InputError(f"report schema {schema_version} is not supported (this version reads {SCHEMA_VERSION})")
