"""Strings from the data made safe to show: the one home of that rule, used by every output format
(terminal, Markdown, HTML, JUnit XML, TOML comments) and by the CLI's error and warning lines.

A report, a file name or a class name can hold any character. Shown raw, an ANSI escape sequence
clears the screen or recolours a log, a line break forges a log line, a bidirectional override
reorders what is read, and XML 1.0 cannot hold control characters at all (the JUnit file would not
parse). `printable` writes every character Python's `str.isprintable()` rejects (control
characters, line and paragraph separators, format characters such as bidirectional overrides and
zero-width marks, lone surrogates, unassigned code points) in Python's escape notation instead, as
`repr()` would: ESC as `\\x1b`, a line break as `\\n`, U+202E as `\\u202e`. Everything else,
spaces and non-ASCII letters included, is kept; a backslash already in the text is kept as it is.

Also here, for the help texts and messages that name a registry's entries: `or_list`, the names as prose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CREDENTIALS = re.compile(r"(?<=//)[^/@\s]+@")  # the `user:password@` of a URL's authority


def printable(text: object) -> str:
    """`text` as a string with every unprintable character written as its escape (see the module docstring)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def or_list(names: Iterable[str], last: str = "or") -> str:
    """'a, b or c': names read from their registry (so that a new entry is listed too) as a help text says them."""
    *rest, final = list(names)
    return f"{', '.join(rest)} {last} {final}" if rest else final


def shortened(names: Iterable[object], limit: int = 6, unit: str = "classes") -> str:
    """'cat, dog, owl', or 'a, b, c, ... (1,000 classes)' past `limit` names: a list a one-line message quotes."""
    items = [str(name) for name in names]
    head = ", ".join(items[:limit])
    return head + (f", ... ({len(items):,} {unit})" if len(items) > limit else "")


def without_credentials(text: str) -> str:
    """`text` with the user name and password of every URL in it removed (`https://u:p@host/x` ->
    `https://host/x`): for messages, reports and logs, which a tracking URI's secret must not reach."""
    return _CREDENTIALS.sub("", text)
