"""The metric registry's row type: what a metric measures (Unit), where in the Report it sits (Place), and
the row itself (Metric), with how tables and gate checks name it.

The table of rows is macs_audit/metrics/registry.py. Plain Python, no numpy.
"""

from __future__ import annotations

import dataclasses
import enum


class Unit(enum.Enum):
    """What a value measures, and so how it is shown and which thresholds make sense."""

    FRACTION = "fraction"  # in [0, 1], shown as percent
    ERROR_RATIO = "error ratio"  # errors relative to a baseline model's, shown as percent; may exceed 100%
    RATIO = "ratio"
    NATS = "nats"
    NUMBER = "number"  # logits, pixel L2 distances, a temperature, a Brier score

    @property
    def percent(self) -> bool:
        """Shown as percent in human-facing output (the report itself holds fractions)."""
        return self in (Unit.FRACTION, Unit.ERROR_RATIO)

    @property
    def bounded(self) -> bool:
        """Values lie in [0, 1]: a threshold outside it is a mistake (`max_ece = 5` meant 5%)."""
        return self is Unit.FRACTION


class Place(enum.Enum):
    """Where in the Report a metric's value sits; also the section `compare` lists it under."""

    CLEAN = "clean"  # report.clean.metrics (every view's metrics hold the same keys)
    TEMPERATURE = "temperature"  # report.temperature_scaling
    ROBUSTNESS = "robustness"  # report.robustness, or the robust view
    CORRUPTION = "corruption"  # report.corruption_summary: means over the corruption grid
    SELECTIVE = "selective"  # report.clean.metrics too (every view's metrics hold them), shown in their own table
    CONFORMAL = "conformal"  # report.conformal
    OOD = "ood"  # report.ood
    UNLABELED = "unlabeled"  # report.unlabeled
    SHIFT = "shift"  # report.shift: means over the natural-shift sets
    REAL_LABELS = "real_labels"  # report.real_labels: ImageNet ReaL labels' scores
    REPRESENTATION = "representation_shift"  # report.representation_shift: the features' two-sample tests


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # the gate's key stem (`max_<name>`) and compare's row key
    label: str  # as the section's tables name it
    _: dataclasses.KW_ONLY  # the rest by keyword: a row reads as what each value means
    unit: Unit
    higher_is_better: bool | None  # None: no better direction (e.g. mean confidence)
    place: Place
    gate: bool = False  # has a `min_`/`max_` threshold and baseline allowances
    compare: bool = True  # has a row in `compare` (False where it restates another metric)
    key: str = ""  # its key in the report where that differs from `name`
    note: str = ""  # a parenthesis the section's table adds to the label
    named: str = ""  # the metric named on its own, where that differs from the default
    short: str = ""  # where space is short (summary cards), where that differs from `label`
    made_by: str = ""  # the `evaluate` options that produce it; "" when every audit does
    # Its label where the model outputs probabilities: the predictor turns them into log-probabilities,
    # so a statistic of the logit vector is then one of log p ("" where the label holds either way).
    on_probabilities: str = ""
    interval: str = ""  # where its section holds its 95% interval, for a metric outside the views
    # A temperature alone moves it (logit scale: margins, norms, L^, the fitted T; set sizes at a fixed
    # coverage): `compare` shows its change but never counts it better or worse (docs/gate.md).
    scale_dependent: bool = False

    @property
    def report_key(self) -> str:
        return self.key or self.name

    @property
    def percent(self) -> bool:
        return self.unit.percent

    @property
    def with_unit(self) -> str:
        """The label with its unit where the unit has a name: 'NLL (nats)'."""
        return f"{self.label} (nats)" if self.unit is Unit.NATS else self.label

    @property
    def table_label(self) -> str:
        """As the row of its section's table: 'ECE (15 bins)', 'NLL (nats)'."""
        return f"{self.label} ({self.note})" if self.note else self.with_unit

    @property
    def title(self) -> str:
        """The metric named on its own, in gate checks and comparisons: 'clean ECE'."""
        if self.named:
            return self.named
        if self.gate and self.place in (Place.CLEAN, Place.SELECTIVE):
            return f"clean {self.with_unit}"
        return self.label

    @property
    def short_label(self) -> str:
        return self.short or self.label

    def table_label_for(self, output: str | None) -> str:
        """`table_label`, or what was measured for a model whose output (report.model.output) is probabilities."""
        return self.on_probabilities if self.on_probabilities and outputs_probabilities(output) else self.table_label

    def title_for(self, *outputs: str | None) -> str:
        """`title` for reports whose models have these outputs: log p where all are probabilities, both
        names where some are."""
        kinds = [outputs_probabilities(output) for output in outputs]
        if not self.on_probabilities or not any(kinds):
            return self.title
        if all(kinds):
            return self.on_probabilities
        return f"{self.title} / {self.on_probabilities.removeprefix('mean ')}"


def outputs_probabilities(output: str | None) -> bool:
    """Whether a report's model.output ('probabilities (detected)', 'logits (declared)') is probabilities."""
    return bool(output) and str(output).split(" ", 1)[0] == "probabilities"
