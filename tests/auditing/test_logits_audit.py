"""`audit_logits`, the audit of saved logits: the sections that need only predictions are the model audit's bit for
bit (run_audit runs the same code on its clean logits), those that need the model are null and the conventions
say why, and a bad array is a one-line InputError."""

import json

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images

from macs_audit.auditing import AuditInputs, AuditOptions, Companions, SavedLogits, SavedSet, audit_logits, run_audit
from macs_audit.data.sources import array_source
from macs_audit.errors import InputError
from macs_audit.models.predictor import load_predictor
from macs_audit.report import Report

CLASSES = [str(i) for i in range(10)]
# The model audit's batch size given: the clean view's sums are accumulated in the same batches.
OPTIONS = AuditOptions(batch_size=64, bootstrap=50, calibration_split=0.3, calibrators=("temperature", "vector"))
LOGITS_ONLY = ("clean", "temperature_scaling", "calibrators", "conformal", "margin_histogram")


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """A tiny model's audit with OOD and unlabeled data, and the audit of the logits it returned."""
    tmp = tmp_path_factory.mktemp("logits")
    predictor = load_predictor(linear_onnx(tmp / "m.onnx", seed=1))
    x, y = tiny_images(300, seed=3)
    source = array_source("tiny", "npz", x, y, CLASSES)
    unlabeled = np.zeros(40, dtype=np.int64)  # labels unused
    inputs = AuditInputs(
        ood_source=array_source("ood", "npz", tiny_images(60, seed=7)[0] // 2, unlabeled[:30].repeat(2), CLASSES),
        unlabeled_source=array_source("target", "npz", tiny_images(40, seed=8)[0], unlabeled, CLASSES),
    )
    model = run_audit(predictor, source, OPTIONS, inputs)
    saved = audit_logits(
        SavedLogits(model.logits, model.labels, CLASSES),
        OPTIONS,
        Companions(
            ood=SavedSet("ood_logits", model.target_logits["ood"]),
            unlabeled=SavedSet("unlabeled_logits", model.target_logits["unlabeled"]),
        ),
        model_info={"path": "m.onnx"},
    )
    return model.report.to_dict(), saved


def test_the_sections_of_predictions_are_the_model_audits_bit_for_bit(audited):
    model, saved = audited
    report = saved.report.to_dict()
    for section in LOGITS_ONLY:
        assert model[section] is not None, section
        assert json.dumps(report[section]) == json.dumps(model[section]), section
    assert model["clean"]["intervals"] and model["calibrators"]["methods"]  # resampled and fitted, not empty
    for section in ("ood", "unlabeled"):  # named by the arrays they were read from, the numbers the same
        named = ("source", "format")
        assert {k: v for k, v in report[section].items() if k not in named} == {
            k: v for k, v in model[section].items() if k not in named
        }
        assert (report[section]["source"], report[section]["format"]) == (f"{section}_logits", "predictions")
    assert report["seeds"] == model["seeds"]


def test_the_sections_that_need_the_model_are_absent_and_said_to_be(audited):
    _, saved = audited
    report = saved.report
    assert report.views == [] and report.robustness is report.corruption_summary is None
    assert report.shift is report.real_labels is report.parity is None
    absent = report.conventions.absent_sections
    assert set(absent) == {"views", "robustness", "corruption_summary", "shift", "real_labels", "parity"}
    assert all(reason for reason in absent.values())
    assert report.model.format == report.data.format == "predictions" and report.model.path == "m.onnx"
    assert (report.data.n, report.data.num_classes, report.runtime.batch_size) == (300, 10, 64)
    text = report.to_json()
    assert Report.from_json(text).to_json() == text  # the schema reads it back, key for key


def test_without_a_batch_size_the_clean_view_is_accumulated_at_once():
    rng = np.random.default_rng(0)
    labels = np.arange(200) % 4
    logits = rng.normal(size=(200, 4)) + 2.0 * np.eye(4)[labels]
    report = audit_logits(SavedLogits(logits, labels.astype(np.int32), "abcd"), AuditOptions(bootstrap=20)).report
    assert report.clean.metrics["n"] == 200 and report.clean.intervals
    assert report.runtime.batch_size is None and report.ood is None and report.temperature_scaling is not None
    hits = (logits.argmax(axis=1) == labels).mean()
    assert report.clean.metrics["accuracy"] == pytest.approx(hits)


LOGITS = np.random.default_rng(1).normal(size=(20, 4))
LABELS = np.arange(20) % 4


@pytest.mark.parametrize(
    ("logits", "labels", "more", "message"),
    [
        (LOGITS[:, 0], LABELS, {}, r"logits must be a 2-D array \(images, classes\), got shape \(20,\)"),
        (LOGITS.astype(np.int64), LABELS, {}, "logits must be floating point, got int64"),
        (
            np.where(np.eye(20, 4) > 0, np.nan, LOGITS),
            LABELS,
            {},
            "logits hold 4 NaN or infinite values, the first at row 0, column 0",
        ),
        (LOGITS[:, :1], LABELS, {"class_names": ["a"]}, "logits must have at least 2 classes, got 1"),
        (LOGITS[:0], LABELS[:0], {}, "logits hold no images"),
        (LOGITS, LABELS[:, None], {}, r"labels must be a 1-D array \(one class index per image\), got shape"),
        (LOGITS, LABELS.astype(float), {}, "labels must be integers, got float64"),
        (LOGITS, LABELS[:19], {}, "19 labels for 20 rows of logits"),
        (LOGITS, np.where(LABELS == 3, 4, LABELS), {}, r"label 4 \(row 3\) is out of range for 4 classes"),
        (LOGITS, LABELS, {"class_names": ["a", "b"]}, "class_names name 2 classes but the logits have 4 columns"),
        (LOGITS, LABELS, {"ood_logits": LOGITS[:, :3]}, "ood_logits have 3 classes but the logits have 4"),
        (LOGITS, LABELS, {"unlabeled_logits": LOGITS[0]}, "unlabeled_logits must be a 2-D array"),
    ],
)
def test_bad_arrays_are_one_line_input_errors(logits, labels, more, message):
    companions = Companions(
        ood=SavedSet("ood", more["ood_logits"]) if "ood_logits" in more else None,
        unlabeled=SavedSet("unlabeled", more["unlabeled_logits"]) if "unlabeled_logits" in more else None,
    )
    with pytest.raises(InputError, match=message) as caught:
        audit_logits(
            SavedLogits(logits, labels, more.get("class_names", "abcd")), AuditOptions(bootstrap=0), companions
        )
    assert "\n" not in str(caught.value)
