"""The Report's typed sections (macs_audit/report/sections.py): which optional keys are written, and the
free-form objects' keys checked like fields."""

from __future__ import annotations

import pytest

from macs_audit.errors import InputError
from macs_audit.report import Conformal, Robustness, Sensitivity, ViewResult


def test_optional_keys_are_left_out_unless_the_schema_writes_null():
    section = Robustness(robust_accuracy=0.5, robust_view="noise+blur").to_dict()
    assert section == {"robust_accuracy": 0.5, "robust_view": "noise+blur"}
    view = ViewResult("clean", "clean", {"accuracy": 0.9}).to_dict()
    assert view["reliability"] is None and view["corruption"] is None and view["intervals"] == {}
    assert Robustness.from_dict({"robustness_ratio": None}).to_dict() == {"robustness_ratio": None}  # as read


def test_a_nested_section_is_read_as_its_class():
    robustness = Robustness.from_dict({"sensitivity": {"lipschitz": 2.5, "n": 8}}, "robustness")
    assert robustness.sensitivity == Sensitivity(mean_gradient_norm=2.5, n=8)


def test_the_keys_a_free_form_object_names_are_checked_and_the_others_kept():
    stats = {"coverage": 0.9, "mean_set_size": 1.5, "worst_class_coverage": 0.8, "worst_class": 3, "new": "x"}
    conformal = Conformal.from_dict(
        {"target_coverage": 0.9, "n_calibration": 5, "n_eval": 5, "methods": {"lac": stats}}
    )
    assert conformal.methods["lac"] == stats
    with pytest.raises(InputError, match="^Conformal.methods.lac.worst_class: expected an integer, got 0.5$"):
        Conformal.from_dict(
            {"target_coverage": 0.9, "n_calibration": 5, "n_eval": 5, "methods": {"lac": {**stats, "worst_class": 0.5}}}
        )
