"""The MMD two-sample test against a direct O(n^2) computation and an exact permutation test, and its calibration:
p-values of same-distribution draws spread over [0, 1], a shifted one gives the smallest p-value."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import kstest

from macs_audit.errors import InputError
from macs_audit.metrics import two_sample


def direct_mmd2(a, b):
    """Unbiased MMD^2 with the median-heuristic Gaussian kernel, pair by pair."""
    pooled = np.concatenate([a, b]).astype(np.float64)
    n = len(pooled)
    distance = [[math.dist(pooled[i], pooled[j]) for j in range(n)] for i in range(n)]
    sigma = float(np.median([distance[i][j] for i in range(n) for j in range(i + 1, n)]))

    def k(i, j):
        return math.exp(-(distance[i][j] ** 2) / (2 * sigma**2))

    m, r = len(a), len(b)
    within_a = sum(k(i, j) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    within_b = sum(k(i, j) for i in range(m, n) for j in range(m, n) if i != j) / (r * (r - 1))
    between = sum(k(i, j) for i in range(m) for j in range(m, n)) / (m * r)
    return within_a + within_b - 2 * between, sigma


def test_mmd2_and_bandwidth_are_the_direct_computation():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(23, 5)) + 3, rng.normal(size=(31, 5)) * 1.3 + 3.2
    expected, sigma = direct_mmd2(a, b)
    result = two_sample.mmd_test(a, b, seed=0, permutations=0)
    assert result["mmd2"] == pytest.approx(expected, rel=1e-10, abs=1e-14)
    assert result["bandwidth"] == pytest.approx(sigma, rel=1e-12)
    assert result["mmd"] == pytest.approx(math.sqrt(max(expected, 0)), rel=1e-10)
    assert (result["n_a"], result["n_b"], result["p_value"]) == (23, 31, 1.0)


def test_the_p_value_approaches_the_exact_permutation_test():
    """4 against 5 samples: the 126 splits enumerated; the seeded Monte Carlo p-value within 4 standard errors."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)) + 0.6
    pooled = np.concatenate([a, b])
    observed, _ = direct_mmd2(a, b)
    splits = [
        direct_mmd2(pooled[list(s)], np.delete(pooled, list(s), axis=0))[0] for s in itertools.combinations(range(9), 4)
    ]
    exact = np.mean(np.array(splits) >= observed - 1e-12)
    result = two_sample.mmd_test(a, b, seed=2, permutations=4000)
    assert result["mmd2"] == pytest.approx(observed, rel=1e-10)
    assert result["p_value"] == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 4000) + 1e-3)


def test_same_distribution_p_values_are_uniform_and_a_shift_is_found():
    p = []
    for seed in range(50):
        rng = np.random.default_rng(100 + seed)
        p.append(
            two_sample.mmd_test(rng.normal(size=(40, 4)), rng.normal(size=(50, 4)), seed=seed, permutations=200)[
                "p_value"
            ]
        )
    p = np.array(p)
    # Binomial(50, 0.05): 8 or more below 0.05 has probability 0.003
    assert (p < 0.05).sum() <= 7, np.sort(p)
    assert kstest(p, "uniform").pvalue > 0.01, np.sort(p)
    rng = np.random.default_rng(7)
    shifted = two_sample.mmd_test(rng.normal(size=(40, 4)), rng.normal(size=(50, 4)) + 0.8, seed=0, permutations=200)
    assert shifted["p_value"] == 1 / 201 and shifted["mmd"] > 0.1


def test_subsampling_bounds_the_samples_and_repeats_by_seed():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(500, 6)).astype(np.float32), rng.normal(size=(300, 6)).astype(np.float32)
    result = two_sample.mmd_test(a, b, seed=4, permutations=50, max_samples=120)
    assert (result["n_a"], result["n_b"], result["max_samples"], result["permutations"]) == (120, 120, 120, 50)
    assert result == two_sample.mmd_test(a, b, seed=4, permutations=50, max_samples=120)
    assert result != two_sample.mmd_test(a, b, seed=5, permutations=50, max_samples=120)
    assert all(isinstance(v, (int, float)) for v in result.values())


def test_identical_samples_give_zero_and_bad_input_is_refused():
    same = np.ones((10, 3))
    result = two_sample.mmd_test(same, same, seed=0, permutations=20)
    assert result["mmd2"] == 0 and result["p_value"] == 1 and result["bandwidth"] == 1.0
    with pytest.raises(InputError, match="differ in dimension"):
        two_sample.mmd_test(np.zeros((5, 3)), np.zeros((5, 4)), seed=0)
    bad = np.zeros((6, 2))
    bad[4, 1] = np.nan
    with pytest.raises(InputError, match=r"set b: 1 samples .*sample 4\)"):
        two_sample.mmd_test(np.zeros((5, 2)), bad, seed=0)
    with pytest.raises(InputError, match="at least 2 samples"):
        two_sample.mmd_test(np.zeros((1, 2)), np.zeros((5, 2)), seed=0)
