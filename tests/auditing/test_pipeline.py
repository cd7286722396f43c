"""macs_audit.auditing.pipeline: `run_audit` checks what it was given before the clean pass and assembles the Report
once (the data, the runtime, the conventions, the seeds, the sections asked for), and `margin_histogram`. What
each section holds is tested beside its module (calibration, robustness, trust, shift, parity)."""

import dataclasses
import datetime as dt

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images

import macs_audit
from macs_audit.auditing import AuditInputs, AuditOptions, RunContext, run_audit
from macs_audit.auditing.options import default_batch_size
from macs_audit.auditing.pipeline import margin_histogram
from macs_audit.data.real_labels import RealLabelSets
from macs_audit.data.sources import array_source
from macs_audit.distributed import Context
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.accumulators import CalibrationAccumulator
from macs_audit.metrics.margins import logit_margin
from macs_audit.models.predictor import load_predictor
from macs_audit.pixels import to_unit_float

QUICK = AuditOptions(batch_size=16, bootstrap=0)


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    return load_predictor(linear_onnx(tmp_path_factory.mktemp("model") / "m.onnx"), device="cpu")


@pytest.fixture(scope="module")
def source():
    x, y = tiny_images(60, seed=1)
    return array_source("tiny", "npz", x, y, [str(i) for i in range(10)])


@pytest.fixture(scope="module")
def audit(predictor, source):
    return run_audit(predictor, source, QUICK)


def test_the_report_records_the_data_runtime_tool_and_seeds(audit, source):
    report = audit.report
    assert (report.data.source, report.data.format, report.data.n, report.data.num_classes) == ("tiny", "npz", 60, 10)
    assert report.data.class_names == list(source.class_names)
    assert report.runtime.batch_size == 16 and report.runtime.world_size == 1 and report.runtime.device == "cpu"
    assert report.runtime.numpy == np.__version__ and report.runtime.python and report.runtime.onnxruntime
    assert (report.tool.name, report.tool.version) == ("macs-audit", macs_audit.__version__)
    assert report.seeds == {"bootstrap": 0, "calibration_split": 0}
    created = dt.datetime.fromisoformat(report.created)
    assert created.utcoffset() == dt.timedelta(0)
    assert abs(dt.datetime.now(dt.timezone.utc) - created) < dt.timedelta(minutes=10)


def test_the_clean_logits_are_the_models_on_the_data_and_the_labels_a_copy(audit, predictor, source):
    images = source.images(np.arange(len(source)))
    want = predictor.predict(to_unit_float(images))
    assert audit.logits.dtype == np.float32 and audit.logits.shape == (60, 10)
    np.testing.assert_allclose(audit.logits, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(audit.labels, source.labels)
    assert not np.shares_memory(audit.labels, source.labels)  # the caller may change it
    assert audit.report.clean.metrics["accuracy"] == pytest.approx(float((want.argmax(1) == source.labels).mean()))


def test_only_the_sections_asked_for_are_run(audit):
    report = audit.report
    assert report.views == [] and report.corruption_summary is None
    assert report.ood is None and report.unlabeled is None and report.shift is None and report.parity is None
    assert report.temperature_scaling is not None and report.conformal is not None
    assert sum(report.margin_histogram.counts) == 60
    assert audit.target_logits == {}


def test_a_small_data_set_is_said_to_be_small(predictor, source):
    """60 images: the temperature is fitted on 10 (one a class: fewer than 50) and the debiased ECE's 15 bins need
    30 images (it has them); 1 image gets no bootstrap intervals, and the report says why."""
    notes = run_audit(predictor, source, QUICK).report.conventions.small_sample
    assert len(notes) == 1 and "fitted on 10 held-out images" in notes[0]
    one = source.subset(np.array([0]))
    conventions = run_audit(predictor, one, dataclasses.replace(QUICK, bootstrap=10, calibration_split=0)).report
    assert "at least 2 samples, got 1" in conventions.conventions.bootstrap_note
    assert any("debiased L2 ECE on 1 images" in note for note in conventions.conventions.small_sample)


def test_the_same_options_give_the_same_report_and_the_seed_moves_the_split(predictor, source, audit):
    again = run_audit(predictor, source, QUICK).report.to_dict()
    first = audit.report.to_dict()
    again["created"] = first["created"]
    assert again == first
    seeded = run_audit(predictor, source, dataclasses.replace(QUICK, seed=7)).report
    assert seeded.seeds == {"bootstrap": 7, "calibration_split": 7}
    assert seeded.temperature_scaling.temperature != audit.report.temperature_scaling.temperature


def test_no_batch_size_is_the_models_default_and_a_negative_one_is_refused(predictor, source):
    small = source.subset(np.arange(20))
    report = run_audit(predictor, small, AuditOptions(bootstrap=0, calibration_split=0)).report
    assert report.runtime.batch_size == default_batch_size((32, 32)) == 500
    with pytest.raises(UsageError, match="^--batch-size must be positive, got -1$"):
        run_audit(predictor, small, AuditOptions(batch_size=-1))


def test_options_that_cannot_hold_together_fail_before_the_clean_pass(predictor, source, monkeypatch):
    from macs_audit.auditing import pipeline

    def no_pass(*args, **kwargs):
        raise AssertionError("the clean pass ran")

    monkeypatch.setattr(pipeline, "evaluate_view", no_pass)
    x, y = tiny_images(9)
    three = array_source("three", "npz", x, y % 3, ["3", "5", "7"])  # 3 of the 10 outputs, named by index
    real = RealLabelSets(sets=tuple((int(y),) for y in three.labels), source="test")
    with pytest.raises(InputError, match="--real-labels scores ImageNet's 1,000 outputs in order, but three's"):
        run_audit(predictor, three, QUICK, AuditInputs(real_labels=real))
    torchrun = Context(rank=0, world_size=2, local_rank=0)
    with pytest.raises(UsageError, match="^--reference does not run under torchrun"):
        run_audit(predictor, source, QUICK, reference=predictor, context=RunContext(ctx=torchrun))


def test_the_margin_histogram_spans_whole_numbers_around_every_margin():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(0, 3, (200, 10)).astype(np.float32), rng.integers(0, 10, 200)
    acc = CalibrationAccumulator(10)
    acc.update(logits, labels)
    margins = logit_margin(logits, labels)
    histogram = margin_histogram(acc)
    assert len(histogram.counts) == 40 and len(histogram.edges) == 41 and sum(histogram.counts) == 200
    assert histogram.edges[0] == np.floor(margins.min()) and histogram.edges[-1] == np.ceil(margins.max())
    same = CalibrationAccumulator(10)
    same.update(np.tile(np.eye(10, dtype=np.float32)[:1] * 2, (5, 1)), np.zeros(5, dtype=np.int64))  # margins all 2
    flat = margin_histogram(same, bins=4)
    assert flat.edges == [2.0, 2.25, 2.5, 2.75, 3.0] and flat.counts == [5, 0, 0, 0]
