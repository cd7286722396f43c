"""The command-line interface: the only layer that prints, draws progress and picks exit codes.

Exit codes: 0 success / gate passed, 1 gate failed, 2 usage error, 3 input or runtime error.
Command groups live in sibling modules and register themselves on `app`.
"""

from macs_audit.cli.common import app


def main() -> None:
    from macs_audit.cli import corrupt, evaluate, finetune, reports  # noqa: F401  (registers commands)

    app()


__all__ = ["app", "main"]
