"""The natural-shift sets: a tree of real photographs under ImageNet-A's WordNet ids through a 1,000-output
model, scored under the restricted and unrestricted conventions, each checked against numpy by hand."""

from pathlib import Path

import numpy as np
import pytest
from fixtures.shift_trees import image_tree, imagenet_model, subset_classes

from macs_audit.auditing import AuditOptions
from macs_audit.auditing.shift import audit_shift, audit_shift_set
from macs_audit.data.label_space import imagenet_synsets, load_mapped_sets
from macs_audit.data.sources import load_imagefolder
from macs_audit.metrics.rms_calibration import rms_calibration_error
from macs_audit.models.config import ModelConfig
from macs_audit.models.predictor import load_predictor
from macs_audit.pixels import to_unit_float


@pytest.fixture(scope="module")
def shift_case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shift")
    classes = subset_classes("imagenet_a", 4)
    tree = image_tree(tmp / "imagenet-a", classes, per_class=3)
    predictor = load_predictor(imagenet_model(tmp / "m.onnx"), {}, device="cpu")
    (mapped,) = load_mapped_sets([("imagenet-a", tree)], 1000, ModelConfig(input_size=predictor.config.input_size))
    return predictor, mapped, classes


def _log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def test_both_conventions_by_hand(shift_case):
    predictor, mapped, classes = shift_case
    synsets = imagenet_synsets()
    assert mapped.space.outputs.tolist() == [synsets.index(c) for c in classes]
    result = audit_shift_set(predictor, mapped, AuditOptions(batch_size=5, bootstrap=0))
    # The same images read on their own, through the same model.
    source = load_imagefolder(Path(mapped.source.name), (32, 32))
    logits = predictor.predict(to_unit_float(source.images(np.arange(len(source)))))
    labels = source.labels
    outputs = np.array([synsets.index(c) for c in classes])

    sub = _log_softmax(logits[:, outputs])
    restricted_hit = sub.argmax(axis=1) == labels
    assert result.restricted.metrics["accuracy"] == pytest.approx(restricted_hit.mean())
    assert result.restricted.metrics["nll"] == pytest.approx(-sub[np.arange(len(labels)), labels].mean(), rel=1e-4)

    full = _log_softmax(logits)
    full_hit = full.argmax(axis=1) == outputs[labels]  # a top-1 outside the four classes is wrong
    assert result.unrestricted.metrics["accuracy"] == pytest.approx(full_hit.mean())
    nll_full = -full[np.arange(len(labels)), outputs[labels]].mean()
    assert result.unrestricted.metrics["nll"] == pytest.approx(nll_full, rel=1e-4)
    # The full softmax spreads mass over 1,000 outputs: each true class gets less than over four.
    assert result.unrestricted.metrics["nll"] > result.restricted.metrics["nll"]
    assert (result.n, result.num_classes, result.num_outputs) == (12, 4, 1000)
    assert "imagenet_synsets" in result.mapped_by


def test_the_section_holds_each_set_and_the_mean(shift_case):
    predictor, mapped, _ = shift_case
    other = type(mapped)("again", mapped.source, mapped.space)
    section, conventions = audit_shift(predictor, (mapped, other), AuditOptions(batch_size=7, bootstrap=20))
    assert set(section.sets) == {"imagenet-a", "again"}
    one = section.sets["imagenet-a"].restricted.metrics
    assert section.mean["restricted"]["accuracy"] == pytest.approx(one["accuracy"])  # two copies of one set
    assert section.sets["again"].restricted.intervals  # the view's bootstrap intervals
    assert set(conventions) == {"shift"}  # the RMS error's rule is every view's (accumulators.CONVENTIONS)
    assert "restricted" in conventions["shift"]
    assert audit_shift(predictor, (), AuditOptions()) == (None, {})


def _rms_by_definition(confidence, correct, beta=100):
    """The RMS calibration error written out as the ImageNet-A/R code's loop does it."""
    order = np.argsort(confidence, kind="stable")
    confidence, correct = confidence[order], correct[order]
    bins = [[i * beta, (i + 1) * beta] for i in range(len(confidence) // beta)]
    bins[-1] = [bins[-1][0], len(confidence)]
    total = 0.0
    for lo, hi in bins[:-1]:
        total += (hi - lo) / len(confidence) * (confidence[lo:hi].mean() - correct[lo:hi].mean()) ** 2
    return np.sqrt(total)


@pytest.mark.parametrize("n", [200, 250, 1000, 1234])
def test_rms_calibration_error_against_the_definition(n):
    rng = np.random.default_rng(n)
    confidence = rng.uniform(0.1, 1.0, n)
    correct = rng.uniform(size=n) < confidence**1.5
    assert rms_calibration_error(confidence, correct) == pytest.approx(_rms_by_definition(confidence, correct))


def test_rms_calibration_error_leaves_out_the_last_bin_and_needs_two():
    confidence = np.r_[np.full(100, 0.5), np.full(150, 0.9)]
    correct = np.r_[np.zeros(100), np.ones(150)]
    # Only the first bin is scored (|0.5 - 0| weighted 100 / 250); the most confident 150 are left out.
    assert rms_calibration_error(confidence, correct) == pytest.approx(np.sqrt(100 / 250 * 0.25))
    assert rms_calibration_error(confidence[:199], correct[:199]) is None
