"""Errors raised by the core. The CLI maps each to a documented exit code.

Every message is one line that says what went wrong and what to do about it.
"""


class MacsAuditError(Exception):
    """Base class: an expected failure with a user-facing one-line message."""

    exit_code = 3


class UsageError(MacsAuditError):
    """The command line or configuration asks for something invalid (exit 2)."""

    exit_code = 2


class InputError(MacsAuditError):
    """A model, data set or report cannot be read or used (exit 3)."""

    exit_code = 3
