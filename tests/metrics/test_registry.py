"""The metric registry: complete against what the audit writes, unambiguous, and light to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from macs_audit.metrics.registry import (
    GATE_METRICS,
    METRICS,
    TEMPERATURE_METRICS,
    VIEW_METRICS,
    Metric,
    Place,
    Unit,
    in_place,
)
from macs_audit.report import (
    Conformal,
    CorruptionMeans,
    CorruptionSummary,
    OODDetection,
    RealLabels,
    RepresentationShift,
    Robustness,
    Shift,
    TemperatureFit,
    Unlabeled,
    load_report,
)

SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "resnet9_c10_ce.audit.json"


def _field_names(cls) -> set[str]:
    """The JSON keys of a section's fields."""
    return set(cls.json_keys())


def test_every_clean_metric_the_audit_writes_has_one_row():
    import numpy as np

    from macs_audit.metrics.accumulators import calibration_metrics

    rng = np.random.default_rng(0)
    written = set(calibration_metrics(rng.normal(size=(200, 10)), rng.integers(0, 10, 200), 10)) - {"n"}
    assert written == {m.name for m in in_place(Place.CLEAN)}  # n is a count, not a metric


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample report not committed")
def test_the_committed_sample_report_holds_registry_metrics_only():
    written = set(load_report(SAMPLE).clean.metrics) - {"n"}
    assert written <= {m.name for m in in_place(Place.CLEAN) + in_place(Place.SELECTIVE)}


def test_every_metric_names_a_key_its_section_has():
    sections = {
        Place.TEMPERATURE: TemperatureFit,
        Place.ROBUSTNESS: Robustness,
        Place.CORRUPTION: CorruptionSummary,
        Place.CONFORMAL: Conformal,
        Place.OOD: OODDetection,
        Place.UNLABELED: Unlabeled,
        Place.SHIFT: Shift,
        Place.REAL_LABELS: RealLabels,
        Place.REPRESENTATION: RepresentationShift,
    }
    for metric in METRICS.values():
        # a view's metrics; the robust view's ECE
        if metric.place in (Place.CLEAN, Place.SELECTIVE) or metric.name == "robust_ece":
            continue
        first = metric.report_key.split(".")[0]
        assert first in _field_names(sections[metric.place]), metric.name
    assert set(VIEW_METRICS) <= _field_names(CorruptionMeans)
    assert set(VIEW_METRICS) | set(TEMPERATURE_METRICS) <= {m.name for m in in_place(Place.CLEAN)}


def test_a_row_names_its_unit_direction_and_place_by_keyword():
    with pytest.raises(TypeError):
        Metric("x", "x", Unit.FRACTION, True, Place.CLEAN)  # type: ignore[misc]
    row = Metric("x", "x", unit=Unit.FRACTION, higher_is_better=True, place=Place.CLEAN)
    assert row.report_key == "x" and not row.gate and row.compare


def test_labels_are_unambiguous_where_they_are_shown_together():
    for place in Place:
        labels = [m.table_label for m in in_place(place)]
        assert len(labels) == len(set(labels)), place
    titles = [m.title for m in METRICS.values()]
    assert len(titles) == len(set(titles))


def test_gate_metrics_have_a_direction_and_say_how_they_are_made():
    for metric in GATE_METRICS.values():
        assert metric.higher_is_better is not None, metric.name
        assert metric.place in (Place.CLEAN, Place.SELECTIVE) or metric.made_by, metric.name


def test_units_decide_percent_and_bounds():
    assert [u for u in Unit if u.percent] == [Unit.FRACTION, Unit.ERROR_RATIO]
    assert [u for u in Unit if u.bounded] == [Unit.FRACTION]
    assert METRICS["mean_corruption_error"].percent and not METRICS["mean_corruption_error"].unit.bounded
    assert METRICS["ece"].table_label == "ECE (15 bins)" and METRICS["ece"].title == "clean ECE"
    assert METRICS["nll"].table_label == "NLL (nats)" and METRICS["nll"].title == "clean NLL (nats)"


def test_the_registry_imports_no_numpy():
    code = "import sys, macs_audit.metrics.registry; sys.exit('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
