"""Class-stratified subsets and splits: sizes per class, seeding, and one shuffling order for both."""

import numpy as np
import pytest

from macs_audit.data.splits import stratified_split, stratified_subset
from macs_audit.errors import UsageError

LABELS = np.repeat(np.arange(4), [10, 20, 30, 40])


def test_subset_allocates_by_largest_remainder():
    pos = stratified_subset(LABELS, 10, seed=0)
    assert len(pos) == 10 and np.all(np.diff(pos) > 0)
    assert np.bincount(LABELS[pos]).tolist() == [1, 2, 3, 4]
    assert np.array_equal(pos, stratified_subset(LABELS, 10, seed=0))
    assert not np.array_equal(pos, stratified_subset(LABELS, 10, seed=1))
    assert np.array_equal(stratified_subset(LABELS, 500), np.arange(len(LABELS)))
    with pytest.raises(UsageError):
        stratified_subset(LABELS, 0)


def test_split_holds_out_the_fraction_of_every_class():
    held, rest = stratified_split(LABELS, 0.2, seed=3)
    assert np.bincount(LABELS[held]).tolist() == [2, 4, 6, 8]
    assert sorted(np.concatenate([held, rest]).tolist()) == list(range(len(LABELS)))


def test_subset_and_split_pick_in_the_same_order_for_the_same_seed():
    # A 10% split of every class is the subset of the first k shuffled positions of each class.
    labels = np.repeat(np.arange(5), 20)
    held, _ = stratified_split(labels, 0.1, seed=7)
    assert np.array_equal(held, stratified_subset(labels, 10, seed=7))
