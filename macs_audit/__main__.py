"""The `macs-audit` script and `python -m macs_audit`.

An interrupt ends a run with one line and exit 130 (docs/errors.md) wherever it lands: inside a command
(`cli.console.handle_errors` says it), while the commands' modules are still importing (Python would print
a traceback: so the CLI is imported here, inside the guard), or while typer parses the command line (it
exits 130 without a word: the line is added here).
"""

from __future__ import annotations

import sys

INTERRUPTED = 130


def main() -> None:
    try:
        from macs_audit.cli import app, console
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(INTERRUPTED)
    try:
        app()
    except SystemExit as exc:
        if exc.code == INTERRUPTED and not console.state["interrupt_reported"]:
            sys.stderr.write("interrupted\n")
        raise


if __name__ == "__main__":
    main()
