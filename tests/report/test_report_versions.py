"""The schema version (macs_audit/report/versions.py): which versions are read, what an older one keeps."""

from __future__ import annotations

import json

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.errors import InputError
from macs_audit.report import SCHEMA_VERSION, Report
from macs_audit.report.versions import version


def test_versions_compare_as_numbers():
    assert version("1.10") > version("1.2") > version("1.0") and version("x") == (0, 0)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(schema_version="9.0"), "^report schema 9.0 is not supported"),
        (lambda d: d.pop("schema_version"), "no schema_version"),
        (lambda d: d.update(schema_version=1.2), "^schema_version: expected a string, got 1.2$"),
    ],
)
def test_a_report_of_another_major_version_or_none_is_an_input_error(change, message):
    data = json.loads(synthetic_report(corruptions=["fog"]).to_json())
    change(data)
    with pytest.raises(InputError, match=message):
        Report.from_dict(data)


def test_a_report_of_an_older_minor_version_is_saved_without_the_sections_added_after_it():
    report = synthetic_report()
    report.calibrators = report.conformal = report.ood = report.unlabeled = None  # the sections 1.2 added
    added = {"calibrators", "conformal", "ood", "unlabeled"}
    assert added <= set(report.to_dict()) and report.schema_version == SCHEMA_VERSION  # as null
    report.schema_version = "1.1"
    assert not added & set(report.to_dict())
    data = report.to_dict()
    assert Report.from_dict(data).to_json() == json.dumps(data, indent=2) + "\n"
