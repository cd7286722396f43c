"""The Report (macs_audit/report/document.py): the same JSON in and out, files read by load_report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macs_audit.errors import InputError
from macs_audit.report import CorruptionMeans, Report, load_report

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "sample_models").glob("*.audit.json"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_committed_report_is_saved_back_byte_identical(path):
    text = path.read_text()
    report = load_report(path)
    assert report.to_json() == text
    assert isinstance(report.corruption_summary.corruptions["fog"], CorruptionMeans)
    assert report.robustness.sensitivity.mean_gradient_norm > 0 and report.clean.reliability.count


def test_the_golden_report_reads_back_to_the_same_json():
    data = json.loads((ROOT / "tests" / "goldens" / "sample_report.json").read_text())
    data.update(tool={"name": "macs-audit", "version": "0.0"}, created="", runtime={})  # its volatile keys
    assert json.loads(Report.from_dict(data).to_json()) == data


def test_not_json_is_an_input_error(tmp_path):
    (tmp_path / "r.json").write_text("{")
    with pytest.raises(InputError, match="r.json: not valid JSON"):
        load_report(tmp_path / "r.json")


def test_a_missing_or_unreadable_file_is_an_input_error_naming_it(tmp_path):
    with pytest.raises(InputError, match="report not found"):
        load_report(tmp_path / "missing.json")
    (tmp_path / "latin1.json").write_bytes(b'{"x": "\xe9"}')
    with pytest.raises(InputError, match="latin1.json is not a macs-audit report: not UTF-8 text"):
        load_report(tmp_path / "latin1.json")
