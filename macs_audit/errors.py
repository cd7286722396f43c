"""Errors raised by the core. The CLI maps each to a documented exit code (docs/errors.md).

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


class OutputError(MacsAuditError):
    """The operating system refused to write an output: permissions, a read-only file system, a full disk (exit 3).

    The message names the path the user gave, never the temporary file the atomic writer used.
    """

    exit_code = 3


class IntegrationError(MacsAuditError):
    """A service the run reports to (an MLflow tracking store) could not be reached or refused what was logged
    (exit 4). Raised only after the run's own outputs are written: the audit is never lost to it."""

    exit_code = 4
