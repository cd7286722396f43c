"""Reading a small file whole: the one home of the bounded read of the JSON and text files a run is given
(a class map, ReaL labels, class prompts, a reference config, a model's config.json, preprocessor_config.json
and sidecar).

Only a regular file is read, and only up to a stated size: `/dev/zero` or a pipe never ends (or waits for a
writer), and a file read whole must fit in memory. JSON nested a hundred thousand deep overflows Python's
parser; that too is one line naming the file.

One exit code per kind of file (`file_error`): a file named by an option (`--class-map FILE`) is part of the
command line, so its faults are usage errors (exit 2), as a gate config's are; a file the model is made of
(its sidecar, a folder's config.json) is part of the input, so its faults are input errors (exit 3), as the
model's own are (docs/errors.md).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError, MacsAuditError, UsageError


def file_error(option: str) -> type[MacsAuditError]:
    """The error for a fault in a file: a UsageError when an option named it (`option`), else an InputError."""
    return UsageError if option else InputError


def read_small_text(path: Path, most: int, *, option: str = "", what: str = "", holds: str = "the file") -> str:
    """The UTF-8 text of `path`, a regular file of at most `most` bytes. `option` is the option that named the
    file (messages say `--class-map FILE`), else `what` says what it is ("sidecar"); `holds` says what it
    should be, in the message for a file too large ("a class map")."""
    shown = f"{option or what} {path}".strip()
    error = file_error(option)
    try:
        # O_NONBLOCK: opening a pipe does not wait for its writer, so that fstat can tell what the file is.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # (not on Windows)
        with os.fdopen(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise error(f"{shown}: not a regular file (a device, a pipe or a folder); pass the file itself")
            data = file.read(most + 1)
    except FileNotFoundError:
        raise error(f"{shown}: not found") from None
    except OSError as exc:
        raise error(f"cannot read {shown}: {exc.strerror or exc}") from None
    if len(data) > most:
        raise error(f"{shown}: larger than {most // 2**20} MiB, the most {holds} may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{shown}: not UTF-8 text") from None


def read_small_json(path: Path, most: int, *, option: str = "", what: str = "", holds: str = "the file") -> Any:
    """The JSON value `path` holds, read as `read_small_text` reads it and parsed by `json_value`."""
    return json_value(
        read_small_text(path, most, option=option, what=what, holds=holds), path, option=option, what=what
    )


def json_value(text: str, path: Path, *, option: str = "", what: str = "") -> Any:
    """The JSON value of `text`, read from `path` (named as `read_small_text` names it); invalid or too deeply
    nested JSON is the error `file_error` gives, naming the file."""
    shown = f"{option or what} {path}".strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise file_error(option)(f"{shown}: not valid JSON ({exc})") from None
    except RecursionError:  # arrays in arrays, a hundred thousand deep
        raise file_error(option)(f"{shown}: JSON nested too deeply (arrays or objects one inside another)") from None
