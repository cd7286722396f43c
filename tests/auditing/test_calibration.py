"""The audit's options (frozen) and its calibration split (auditing/options.py, auditing/calibration.py): drawn once,
the temperature, the calibrators and the conformal sets fitted on its fit part and scored on the rest."""

import dataclasses

import numpy as np
import pytest

from macs_audit.auditing import AuditOptions, calibration_split, conformal_fit
from macs_audit.auditing.calibration import calibrators_section, helpful_temperature, temperature_section
from macs_audit.data.splits import stratified_split
from macs_audit.errors import UsageError


def test_options_are_frozen_and_replaced_not_changed():
    options = AuditOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.bootstrap = 0  # type: ignore[misc]
    assert dataclasses.replace(options, bootstrap=0).bootstrap == 0 and options.bootstrap == 1000


def test_the_split_is_the_stratified_one_and_every_fit_reads_it():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 25)
    logits = rng.normal(size=(100, 4)).astype(np.float32) + 2 * np.eye(4, dtype=np.float32)[labels]
    split = calibration_split(labels, 0.2, 7)
    assert split is not None
    fit, scored = stratified_split(labels, 0.2, 7)
    assert np.array_equal(split.fit, fit) and np.array_equal(split.scored, scored)
    sets = conformal_fit(logits, labels, split, coverage=0.9)
    assert sets is not None and np.array_equal(sets.scored, split.scored)
    temperature = temperature_section(logits, labels, 4, split)
    assert temperature is not None and (temperature.n_fit, temperature.n_eval) == (len(fit), len(scored))
    calibrators = calibrators_section(logits, labels, ("temperature",), split)
    assert calibrators is not None and calibrators.seed == 7 and calibrators.n_fit == len(fit)


def test_no_split_without_a_fraction_and_a_usage_error_outside_zero_to_one():
    labels = np.repeat(np.arange(2), 5)
    assert calibration_split(labels, 0, 0) is None
    assert conformal_fit(np.zeros((10, 2)), labels, None, coverage=0.9) is None
    for fraction in (1.0, -0.1, float("nan")):
        with pytest.raises(UsageError, match=r"--calibration-split must be in \[0, 1\)"):
            calibration_split(labels, fraction, 0)


def test_estimates_from_too_few_images_are_noted_with_their_stated_sizes():
    from macs_audit.auditing.calibration import DEBIASED_MIN_PER_BIN, TEMPERATURE_MIN_FIT, small_sample_notes

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 5)  # 15 images: a fit part of 3
    logits = rng.normal(size=(15, 3)).astype(np.float32) + 3 * np.eye(3, dtype=np.float32)[labels]
    split = calibration_split(labels, 0.2, 0)
    temperature = temperature_section(logits, labels, 3, split)
    assert temperature is not None and temperature.n_fit == 3
    notes = small_sample_notes(15, temperature, 15)
    assert len(notes) == 2
    assert notes[0].startswith(f"temperature T = {temperature.temperature:.3f} fitted on 3 held-out images")
    assert f"fewer than {TEMPERATURE_MIN_FIT}" in notes[0]
    assert notes[1].startswith("debiased L2 ECE on 15 images") and f"({DEBIASED_MIN_PER_BIN * 15})" in notes[1]
    enough = dataclasses.replace(temperature, n_fit=TEMPERATURE_MIN_FIT)
    assert small_sample_notes(DEBIASED_MIN_PER_BIN * 15, enough, 15) == []
    assert small_sample_notes(1000, None, 15) == []  # no temperature fitted: nothing to say of it


def test_the_temperature_section_keeps_the_reliability_before_and_after_scaling():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 50)
    logits = 5 * (rng.normal(size=(200, 4)) + np.eye(4)[labels]).astype(np.float32)  # overconfident
    temperature = temperature_section(logits, labels, 4, calibration_split(labels, 0.3, 0))
    assert temperature is not None and temperature.temperature > 1
    raw, scaled = temperature.raw_reliability, temperature.scaled_reliability
    assert sum(raw.count) == sum(scaled.count) == temperature.n_eval
    # Dividing by T > 1 lowers every confidence: the mass moves out of the top bin.
    assert scaled.count[-1] < raw.count[-1]


def test_a_conformal_split_of_its_own_is_drawn_from_what_the_temperature_did_not_see():
    """--conformal-split F: the sets are fitted on a class-stratified F of the temperature's scored part and
    scored on the rest, so neither their fit nor their scores touch the temperature's images."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 50)
    logits = rng.normal(size=(200, 4))
    split = calibration_split(labels, 0.2, seed=3)
    shared = conformal_fit(logits, labels, split, coverage=0.9)
    own = conformal_fit(logits, labels, split, coverage=0.9, conformal_split=0.5)
    assert np.array_equal(shared.scored, split.scored)
    fit = np.setdiff1d(split.scored, own.scored)
    assert len(fit) == 80 and np.isin(fit, split.scored).all() and not np.isin(own.scored, split.fit).any()
    own_fit, _ = stratified_split(labels[split.scored], 0.5, 3)
    assert np.array_equal(fit, split.scored[own_fit])
    assert own.split.startswith("its own: 0.5 of the temperature's scored part")
    with pytest.raises(UsageError, match="--conformal-split must be a fraction in"):
        conformal_fit(logits, labels, split, coverage=0.9, conformal_split=1.0)


def test_raps_parameters_given_are_used_and_malformed_ones_refused():
    from macs_audit.auditing.calibration import parse_raps

    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(4), 50)
    logits = rng.normal(size=(200, 4))
    split = calibration_split(labels, 0.3, seed=0)
    sets = conformal_fit(logits, labels, split, coverage=0.9, raps=parse_raps("1, 0.2"))
    assert (sets.thresholds["raps"].k_reg, sets.thresholds["raps"].penalty) == (1, 0.2)
    record = sets.records(logits)["raps"]
    assert record["k_reg"] == 1 and record["penalty"] == 0.2
    assert parse_raps(None) is None
    for bad in ("1", "a,0.1", "-1,0.1", "1,-0.5", "1,inf", "1,0.1,2"):
        with pytest.raises(UsageError, match="--raps must be K_REG,PENALTY"):
            parse_raps(bad)


def test_the_label_free_estimates_get_the_temperature_only_where_it_lowered_the_nll():
    """A T fitted on a few images can make the scored part worse (the 100-image golden's T = 0.019 from 20
    images: NLL 15.6 against 0.38): then the label-free estimates are fitted on the raw scores, not on it."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 50)
    logits = 3 * (rng.normal(size=(200, 4)) + 1.5 * np.eye(4)[labels]).astype(np.float32)  # overconfident
    good = temperature_section(logits, labels, 4, calibration_split(labels, 0.5, 0))
    assert good is not None and good.temperature > 1 and good.scaled["nll"] < good.raw["nll"]
    assert helpful_temperature(good) == good.temperature
    for nll in (good.raw["nll"], good.raw["nll"] + 0.1):  # no better than uncalibrated: not used
        assert helpful_temperature(dataclasses.replace(good, scaled={**good.scaled, "nll": nll})) is None
    assert helpful_temperature(None) is None
