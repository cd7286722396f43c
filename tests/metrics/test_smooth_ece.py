"""Smooth ECE and the smoothed reliability curve against their references (relplot, scipy's DCT), on data whose
calibration is known, and its bootstrap path (roots of many resamples' masses at once) against the exact roots."""

import numpy as np
import pytest
from references import CASES, sample_with_calibration

from macs_audit.metrics import estimators as E
from macs_audit.metrics import smooth_ece as S


@pytest.mark.parametrize("case", CASES)
def test_smooth_ece_agrees_with_relplot(case):
    relplot = pytest.importorskip("relplot")
    f, y = sample_with_calibration(10_000, 0, CASES[case])
    ours, sigma = S.smooth_ece(f, y)
    ref, ref_sigma = relplot.smECE(f, y.astype(float), return_width=True)
    # relplot bisects the bandwidth to 1/1024 and rounds confidences to its own mesh; we bisect to
    # 2^-20 on a 5,000-cell grid: the fixed points agree to within relplot's resolution.
    assert abs(sigma - ref_sigma) < 2e-3
    assert abs(ours - ref) < 1e-3
    assert abs(ours - sigma) < 1e-5  # the fixed point: the estimate equals its bandwidth


def test_smoothed_reliability_curve_follows_a_known_calibration_function():
    """Confidence uniform on [0.5, 1), right with probability c - 0.05: the curve is c - 0.05 inside the
    support (the kernel blurs its ends), the density integrates to 1, and no accuracy is drawn where there
    are no samples (well below 0.5)."""
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.5, 1.0, 20_000)
    correct = rng.random(20_000) < confidence - 0.05
    _, sigma = S.smooth_ece(confidence, correct)
    curve = S.smooth_reliability(confidence, correct, sigma)
    t = np.array(curve["confidence"])
    inside = (t > 0.55) & (t < 0.95)
    accuracy = np.array([a for a, keep in zip(curve["accuracy"], inside, strict=True) if keep])
    assert np.abs(accuracy - (t[inside] - 0.05)).max() < 0.02
    assert np.trapezoid(curve["density"], t) == pytest.approx(1.0, abs=1e-3)
    assert all(a is None for a, x in zip(curve["accuracy"], t, strict=True) if x < 0.3)
    assert curve["sigma"] == sigma and len(t) == 101


def _resampled_masses(n, seed, case, resamples=200):
    """Residual masses of `resamples` bootstrap resamples of one sample, and its point estimate's sigma*."""
    from macs_audit.metrics.resampling import draw_counts

    f, y = sample_with_calibration(n, seed, CASES[case])
    counts = next(draw_counts(n, resamples, np.random.default_rng(seed), rows=resamples))
    cells = S.grid_cells(f)
    held, cell_of_sample = np.unique(cells, return_inverse=True)
    on_held = S.prefix_residual_masses(E.SortedPrefix(f, y, counts), cells)
    direct = S.residual_masses(cells, y - f, counts)
    assert np.abs(on_held - direct[:, held]).max() < 1e-15  # the prefix sums' masses are residual_masses'
    assert not np.delete(direct, held, axis=1).any()  # on the cells that hold samples, and nowhere else
    assert np.array_equal(S.residual_masses(cell_of_sample, y - f, counts, len(held)), direct[:, held])
    return direct, S.smooth_ece(f, y)[1]


@pytest.mark.parametrize("n", [50, 500, 10_000])
@pytest.mark.parametrize("case", CASES)
def test_resamples_started_from_the_point_estimate_find_the_whole_ranges_roots(case, n):
    """The bootstrap's start from the point estimate's sigma* against the search of [MIN_SIGMA, 1], on 200
    resamples, plus rows the start cannot bracket (no residual at all: the root below MIN_SIGMA; a residual of
    one sign: smECE flat in sigma, hit by the first step), and starts far from every root."""
    masses, near = _resampled_masses(n, 7, case)
    flat = np.zeros(S.GRID_CELLS)
    flat[S.GRID_CELLS // 2 :] = 0.2 / (S.GRID_CELLS // 2)
    masses = np.vstack([masses, np.zeros(S.GRID_CELLS), flat])
    value, sigma = S.smooth_ece_of_masses(masses)
    assert sigma[-2] == S.MIN_SIGMA and sigma[-1] == pytest.approx(0.2, abs=1e-9)
    exact_value, exact_sigma = _exact_roots(masses, sigma)
    assert np.abs(sigma - exact_sigma).max() <= S.ROOT_TOLERANCE
    assert np.abs(value - exact_value).max() <= S.ROOT_TOLERANCE
    for start in (near, 0.5 * near, 2 * near, 0.9, 2 * S.MIN_SIGMA):
        fast_value, fast_sigma = S.smooth_ece_of_masses(masses, start)
        assert np.abs(fast_sigma - exact_sigma).max() <= S.ROOT_TOLERANCE
        assert np.abs(fast_value - exact_value).max() <= S.ROOT_TOLERANCE
        # Each within ROOT_TOLERANCE of the root, so within twice that of each other.
        assert np.abs(fast_sigma - sigma).max() <= 2 * S.ROOT_TOLERANCE
        assert np.abs(fast_value - value).max() <= 2 * S.ROOT_TOLERANCE


@pytest.mark.parametrize("n", [50, 10_000])
@pytest.mark.parametrize("case", CASES)
def test_masses_on_the_held_cells_find_the_roots_of_every_cell(case, n):
    """A bootstrap's masses on the cells that hold samples, their coefficients made directly (CellCosines), and its
    roots to RESAMPLED_ROOT_TOLERANCE: the roots of the masses on every cell by the FFT, each bandwidth and value
    within that tolerance; with a start far from the roots too (a search of the whole range, by the FFT)."""
    masses, near = _resampled_masses(n, 11, case)
    exact_value, exact_sigma = _exact_roots(masses, S.smooth_ece_of_masses(masses)[1])
    held = np.flatnonzero(masses.any(axis=0))
    for start in (near, 2 * S.MIN_SIGMA):
        basis = S.CellCosines(held)
        value, sigma = S.smooth_ece_of_masses(masses[:, held], start, S.RESAMPLED_ROOT_TOLERANCE, basis)
        assert np.abs(sigma - exact_sigma).max() <= S.RESAMPLED_ROOT_TOLERANCE
        assert np.abs(value - exact_value).max() <= S.RESAMPLED_ROOT_TOLERANCE


def _exact_roots(masses, sigma):
    """(smECE, sigma*) per row to about 1e-15, refined from roots found to ROOT_TOLERANCE (`sigma`): regula falsi
    on [sigma - 2 tol, sigma + 2 tol], where smECE_sigma - sigma is linear to far below the tolerance. Rows
    whose root lies at an end of [MIN_SIGMA, 1] keep it."""
    spectrum = S._mirror_spectrum(masses)

    def excess(s):
        return S._smooth_ece_of_spectrum(spectrum, s) - s

    a, b = sigma - 2 * S.ROOT_TOLERANCE, sigma + 2 * S.ROOT_TOLERANCE
    ga, gb = excess(a), excess(b)
    inside = (sigma > S.MIN_SIGMA) & (sigma < 1)
    assert ((ga > 0) & (gb < 0) | ~inside).all()  # the roots found are within the tolerance
    for _ in range(3):
        c = np.where(inside, (a * gb - b * ga) / (gb - ga), sigma)
        gc = excess(c)
        above = gc > 0
        a, ga = np.where(above, c, a), np.where(above, gc, ga)
        b, gb = np.where(above, b, c), np.where(above, gb, gc)
    return gc + c, c


@pytest.mark.parametrize("sigma", [0.05, 0.0012, S.MIN_SIGMA])  # the inverse's two cases: kept below half or not
def test_smoothing_is_scipys_dct_and_inverse_dct(sigma):
    """The masses' coefficients are scipy's DCT-II, the smoothed masses its inverse of them times the gain
    (the frequencies with a gain under 1e-30 left out), and a row's smECE does not depend on the rows beside it."""
    fft = pytest.importorskip("scipy.fft")
    masses, _ = _resampled_masses(2_000, 3, "wavy", resamples=12)
    spectrum = S._mirror_spectrum(masses)
    reference = fft.dct(masses, type=2, axis=1)
    assert np.abs(spectrum - reference).max() <= 1e-14 * np.abs(reference).max()
    gain = np.exp(-0.5 * (np.pi * np.arange(S.GRID_CELLS) * sigma) ** 2)
    smoothed = fft.idct(reference * np.where(gain < 1e-30, 0.0, gain), type=2, axis=1)
    assert np.abs(S._smoothed(spectrum, sigma) - smoothed).max() <= 1e-14 * np.abs(smoothed).max()
    value, _ = S.smooth_ece_of_masses(masses)
    alone = S.smooth_ece_of_masses(masses[-1:])
    assert alone[0][0] == pytest.approx(value[-1], abs=1e-12)


def test_relplot_differs_where_the_mass_sits_at_one_by_its_unmirrored_end_cell(monkeypatch):
    """Confidences crowding at 1 (an overconfident model's): relplot reads higher than the integral at the same
    bandwidth, well beyond its grid's resolution, because its reflection leaves out the end cells
    (`np.flip(values)[1:]`); mirrored there too, it agrees with ours (docs/method.md, smooth ECE)."""
    relplot = pytest.importorskip("relplot")
    import sys

    metrics = sys.modules[relplot.smECE.__module__]
    rng = np.random.default_rng(3)
    f = np.concatenate([1 - rng.exponential(1e-4, 6000).clip(0, 1), rng.beta(5, 1.5, 4000)])
    y = rng.random(len(f)) < np.where(f > 0.999, 0.95, f**2)
    sigma = 0.04
    ours = S.smooth_ece_at(f, y, sigma)
    as_released = metrics.smooth_ece(f, y.astype(float), sigma)
    assert as_released - ours > 5e-3

    kernel = metrics.ReflectedGaussianKernel

    def mirrored_end_cells(self, values, eval_points):
        ker = self.kernel_ev(eval_points)
        n = len(values)
        extended = np.concatenate([np.flip(values)[:-1], values, np.flip(values)[1:]])
        extended[n - 1] += values[0]  # the mass at t = 0 and t = 1 reflected onto itself
        extended[2 * n - 2] += values[-1]
        return np.convolve(extended, ker, "valid")[eval_points // 2 : eval_points // 2 + eval_points]

    monkeypatch.setattr(kernel, "convolve", mirrored_end_cells)
    monkeypatch.setattr(metrics.config, "smECE_mesh_pts", 5000)
    assert abs(metrics.smooth_ece(f, y.astype(float), sigma) - ours) < 1e-3
