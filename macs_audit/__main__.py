"""The `macs-audit` script and `python -m macs_audit`.

An interrupt ends a run with one line and exit 130 (docs/errors.md) wherever it lands: inside a command
(`cli.console.handle_errors` says it), while the commands' modules are still importing (Python would print
a traceback: so the CLI is imported here, inside the guard), or while typer parses the command line (it
exits 130 without a word: the line is added here).

At exit every object still alive is frozen out of the garbage collector (the last exit handler: it is
registered when this module loads), so that the interpreter's teardown does not walk them all (with torch
imported, most of a second of a default audit, after its output is complete). Teardown still releases them
by reference count; cycles among them are left to the end of the process.
"""

from __future__ import annotations

import atexit
import gc
import sys

INTERRUPTED = 130
atexit.register(gc.freeze)


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
