"""`--help` in groups: a command's options listed under the panel of what they set (data, model, views,
analysis, outputs, runtime) instead of one flat block, in click's plain layout (cli/__init__.py explains
why not rich's). A command's panels are named here, by parameter name, once; an option no panel names is
listed under the last panel, "Other options", so a new option is never dropped from the help."""

from __future__ import annotations

from typing import Any

import typer.core

DATA, MODEL, VIEWS, ANALYSIS, GATE, OUTPUTS, RUNTIME = (
    "Data",
    "Model",
    "Views",
    "Analysis",
    "Gate",
    "Outputs",
    "Runtime",
)
OTHER = "Other options"
ORDER = (DATA, MODEL, VIEWS, ANALYSIS, GATE, OUTPUTS, RUNTIME, OTHER)  # as the help lists them

# Parameter name -> panel, per command; the panels are listed in the order their first option appears.
PANELS: dict[str, dict[str, str]] = {
    "evaluate": {
        **dict.fromkeys(("data", "data_format", "split", "limit"), DATA),
        **dict.fromkeys(
            (
                "arch",
                "num_classes",
                "input_size",
                "crop_pct",
                "interpolation",
                "mean",
                "std",
                "output_kind",
                "trust_pickled",
                "class_prompts",
                "precision",
                "reference",
                "reference_config",
                "provider",
                "reference_provider",
            ),
            MODEL,
        ),
        **dict.fromkeys(
            (
                "perturbations",
                "sensitivity_samples",
                "sensitivity_directions",
                "corruptions",
                "severities",
                "corrupted_data",
                "frost_textures",
                "corruption_set",
                "corruption_baseline",
                "shift_data",
                "class_map",
                "real_labels",
                "real_labels_file",
            ),
            VIEWS,
        ),
        **dict.fromkeys(
            ("calibration_split", "calibrators", "bootstrap", "seed", "coverage", "ood_data", "unlabeled"), ANALYSIS
        ),
        **dict.fromkeys(("gate", "config", "baseline", "use_interval"), GATE),
        **dict.fromkeys(("output", "output_format", "predictions", "quiet"), OUTPUTS),
        **dict.fromkeys(("batch_size", "workers", "device"), RUNTIME),
    },
}


def assign_panels(command_name: str, parameters: dict[str, Any]) -> None:
    """Set each option's panel (typer's rich_help_panel, which PanelledCommand lists in plain help)."""
    panels = PANELS.get(command_name)
    if panels is None:
        return
    for name, info in parameters.items():
        if isinstance(info, typer.models.OptionInfo) and info.rich_help_panel is None:
            info.rich_help_panel = panels.get(name, OTHER)


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
