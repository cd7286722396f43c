"""The parity gate ([gate.parity], gating/config.py and gating/checks.py) and init's parity table (gating/thresholds.py)
on real parity reports of tiny ONNX models: a copy of the candidate passes, a candidate with its logits scaled by
3 fails the calibration keys and keeps its agreement, one with two classes swapped fails the agreement."""

import shutil

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from fixtures.broken_models import scaled_logits, swapped_classes

from macs_audit.auditing import AuditOptions, run_audit
from macs_audit.compare import compare
from macs_audit.data.sources import array_source
from macs_audit.errors import InputError, UsageError
from macs_audit.gating.checks import run_gate
from macs_audit.gating.config import parse_config
from macs_audit.gating.thresholds import parity_lines
from macs_audit.models.predictor import load_predictor
from macs_audit.report import Report

OPTIONS = AuditOptions(batch_size=100, perturbations=(), sensitivity_samples=0, bootstrap=100, calibrators=())
GATE = {
    "parity": {"min_agreement": 0.99, "max_ece_increase": 0.01, "max_nll_increase": 0.02, "max_coverage_drop": 0.02}
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parity")
    x, y = tiny_images(400, seed=5)
    source = array_source("tiny", "npz", x, y, [str(i) for i in range(10)])
    reference = linear_onnx(folder / "reference.onnx", seed=4)
    predicted = load_predictor(reference).predict(x.astype(np.float32).transpose(0, 3, 1, 2) / 255).argmax(axis=1)
    first, second = np.argsort(np.bincount(predicted, minlength=10))[-2:]  # the two classes most predicted
    candidates = {
        "copy": shutil.copy(reference, folder / "copy.onnx"),
        "scaled": scaled_logits(reference, folder / "scaled.onnx"),
        "swapped": swapped_classes(reference, folder / "swapped.onnx", 10, int(first), int(second)),
    }
    out = {}
    for name, path in candidates.items():
        report = run_audit(load_predictor(path), source, OPTIONS, reference=load_predictor(reference)).report
        out[name] = Report.from_json(report.to_json())  # as saved and read back
    return out


def failed(result):
    return sorted(c.name for c in result.failures)


def test_a_copy_passes_and_broken_candidates_fail_the_right_keys(reports):
    config = parse_config(GATE)
    assert run_gate(reports["copy"], config).passed
    scaled = run_gate(reports["scaled"], config)
    assert "parity.clean.max_ece_increase" in failed(scaled) and "parity.clean.max_nll_increase" in failed(scaled)
    assert "parity.clean.min_agreement" not in failed(scaled)  # the same predictions, other confidences
    swapped = run_gate(reports["swapped"], config)
    assert "parity.clean.min_agreement" in failed(swapped)
    assert {c.name for c in swapped.checks} >= {
        "parity.clean.max_coverage_drop.lac",
        "parity.clean.max_coverage_drop.aps",
    }


def test_intervals_view_overrides_and_missing_sections(reports):
    config = parse_config({"use_interval": True, "parity": {"min_agreement": 0.5, "clean": {"min_agreement": 1.0}}})
    [check] = run_gate(reports["swapped"], config).checks
    view = reports["swapped"].parity.view("clean")
    assert check.threshold == 1.0 and check.observed == view.agreement_interval[0] and not check.passed
    with pytest.raises(InputError, match="no such view"):
        run_gate(reports["copy"], parse_config({"parity": {"fog@3": {"min_agreement": 0.9}}}))
    no_parity = Report.from_dict({**reports["copy"].to_dict(), "parity": None})
    with pytest.raises(InputError, match="no parity section"):
        run_gate(no_parity, parse_config(GATE))


@pytest.mark.parametrize(
    "table, message",
    [
        ({"parity": {"min_agremeent": 0.9}}, "did you mean 'min_agreement'"),
        ({"parity": {"max_ece_increase": 5}}, "outside \\[0, 1\\]"),
        ({"parity": {"max_nll_increase": -1}}, "must be >= 0"),
        ({"parity": {"clean": {}}}, "is empty"),
    ],
)
def test_bad_parity_tables_are_usage_errors(table, message):
    with pytest.raises(UsageError, match=message):
        parse_config(table)


def test_init_writes_a_parity_table_its_report_passes(reports):
    import tomllib

    for name in ("copy", "scaled"):
        text = "\n".join(["[gate]", *parity_lines(reports[name], "gate")[4:]])
        table = tomllib.loads(text)["gate"]
        assert set(table) == {"min_agreement", "max_ece_increase", "max_nll_increase", "max_coverage_drop"}
        assert run_gate(reports[name], parse_config({"parity": table}), use_interval=True).passed, name


def test_compare_of_two_parity_reports(reports):
    rows = {r.key: r for r in compare(reports["copy"], reports["scaled"]).rows if r.section == "parity"}
    assert rows["clean.ece_change"].a == 0.0 and rows["clean.ece_change"].status == "worse"
    assert rows["clean.agreement"].status == "same"
