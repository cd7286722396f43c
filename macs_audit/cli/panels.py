"""`--help` in groups: a command's options listed under the panel of what they set (data, model, views,
analysis, gate, outputs, runtime) instead of one flat block, in click's plain layout (cli/__init__.py explains
why not rich's). Each option's panel is the options table's (settings/table.py); an option without one is
listed under the last panel, "Other options", so a new option is never dropped from the help."""

from __future__ import annotations

from typing import Any

import typer.core

from macs_audit.settings.table import PANELS

OTHER = "Other options"
ORDER = (*PANELS, OTHER)  # as the help lists them


class PanelledCommand(typer.core.TyperCommand):
    """A command whose plain --help lists its options by panel (its arguments first, --help last)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                panel = getattr(param, "rich_help_panel", None) or OTHER
                panels.setdefault(panel, []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if list(panels) == [OTHER]:  # a command with no panels: click's one block
            with formatter.section("Options"):
                formatter.write_dl(panels[OTHER])
            return
        for panel in sorted(panels, key=ORDER.index):
            with formatter.section(panel if panel == OTHER else f"{panel} options"):
                formatter.write_dl(panels[panel])
