"""Out-of-distribution detection from the penultimate features: the input f of the final classifier layer
(logits z = W f + b), fitted on in-distribution features, numpy only.

Every score is higher for "more in-distribution" (the convention of `metrics.ood`, whose metrics and intervals
they plug into). Scores, from the fit set's features, labels and logits and the head (W, b):

- `mahalanobis` (Lee et al. 2018, without input preprocessing): class means mu_k and one shared covariance S
  (the class-centred features' second moment, divided by N); -min_k (f - mu_k)^T S^-1 (f - mu_k).
- `rmds` (relative Mahalanobis, Ren et al. 2021): the class distances less the background Gaussian's (mean and
  covariance of all fit features): -min_k (d_k(f) - d_0(f)).
- `knn` (Sun et al. 2022): -||u - u_(k)||, u = f / ||f||, u_(k) the k-th nearest L2-normalised fit feature.
  k: 50 for CIFAR-10's 50,000 training images in the paper, which keeps k proportional to the share of the
  training set it samples; here k = round(50 N / 50,000), at least 1 (`knn_k`).
- `vim` (Wang et al. 2022): origin o = -pinv(W) b; the principal space of the fit features' second moment about
  o, of dimension 1000 for D >= 2048, 512 for D >= 768, else D // 2 (the paper's code); alpha = mean max logit /
  mean residual norm over the fit set; energy(z) - alpha ||residual of f - o||.
- `react` (Sun et al. 2021): energy of W min(f, c) + b, c the 90th percentile of every fit activation.
- `ash_s` (Djurisic et al. 2023, ASH-S): per sample, keep the top 10% of the activations (the rest 0), scale
  them by exp(s1 / s2) (sums before and after pruning); energy of W f' + b.
- `gen` (Liu et al. 2023): -sum over the top M = min(100, K) softmax probabilities of p^g (1 - p)^g, g = 0.1.

energy(z) = logsumexp_j z_j (`metrics.ood`'s energy). Arithmetic in float64; the KNN search alone multiplies
float32 unit vectors, then measures its k + KNN_CANDIDATES best candidates again in float64. Scoring works on
row chunks, no intermediate above CHUNK_ELEMENTS elements (KNN never holds an N x M distance matrix).

pytorch-ood 0.4 (the tests' reference) returns outlier scores (higher = OOD) and differs from the papers by
constant factors: its Mahalanobis is half the squared distance under the class-centred sum of f f^T (not its
mean), its RMD uses both sums too, and its GEN averages the top-M terms and clamps p to [1e-7, 1 - 1e-7]; the
tests check ours against theirs through those factors.

Covariances: a covariance of rank below D (fewer fit samples than feature dimensions, or a feature that never
varies) is not inverted: it is shrunk toward a scaled identity by Ledoit and Wolf's coefficient (scikit-learn's
`ledoit_wolf_shrinkage` on the centred fit features), and the fitted object's `notes()` says so.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.ood import GEN_GAMMA, GEN_TOP_CLASSES, energy, gen_scores

DETECTORS = ("mahalanobis", "rmds", "knn", "vim", "react", "ash_s", "gen")

KNN_K = 50  # Sun et al. 2022's k on CIFAR-10 ...
KNN_K_FIT_SIZE = 50_000  # ... whose training set has 50,000 images: k = max(1, round(KNN_K * N / KNN_K_FIT_SIZE))
# Candidates beyond k that the float32 search hands to the float64 re-measurement: the k-th distance is exact
# unless more than these many fit features lie within float32 rounding (~1e-6) of it.
KNN_CANDIDATES = 32
# The search's selection: columns are dealt into groups of KNN_GROUP (column j to group j mod M // KNN_GROUP); the
# c most similar lie in the c groups with the largest maxima, so only those groups' columns are partitioned.
KNN_GROUP = 16
REACT_PERCENTILE = 90.0  # Sun et al. 2021's clipping percentile
ASH_PERCENTILE = 90.0  # ASH-S prunes this percentage of each sample's activations (Djurisic et al. 2023's ImageNet)
VIM_DIMENSIONS = ((2048, 1000), (768, 512))  # ViM's principal dimension: (feature dim at least, dimension); else D // 2
CHUNK_ELEMENTS = 1 << 23  # the largest intermediate array of scoring, in elements (64 MiB in float64)

CONVENTION = (
    "scores from the penultimate features f (the final layer's input, logits z = W f + b), fitted on "
    "in-distribution features, float64, higher = in-distribution: mahalanobis = -min_k squared Mahalanobis "
    "distance to the class means (one shared covariance); rmds = -min_k (class distance - background distance); "
    "knn = -distance to the k-th nearest L2-normalised fit feature (k = round(50 N / 50,000), at least 1); "
    "vim = energy - alpha x residual norm off the principal space about -pinv(W) b; react = energy of W min(f, c) + b, "
    "c the 90th percentile of the fit activations; ash_s = energy after keeping each sample's top 10% of "
    "activations scaled by exp(s1/s2); gen = -sum of p^0.1 (1 - p)^0.1 over the top min(100, K) softmax "
    "probabilities; energy = logsumexp z; a covariance of rank below D shrunk by Ledoit-Wolf (said in the notes)"
)


@dataclasses.dataclass(frozen=True)
class DetectorOptions:
    """The detectors' settings; each default is the module's constant."""

    knn_k: int | None = None  # None: the fit set's size gives k (KNN_K per KNN_K_FIT_SIZE)
    react_percentile: float = REACT_PERCENTILE
    ash_percentile: float = ASH_PERCENTILE
    gen_gamma: float = GEN_GAMMA
    gen_top: int = GEN_TOP_CLASSES
    vim_dimension: int | None = None  # None: the paper's rule for the feature dimension (`vim_dimension`)

    def __post_init__(self) -> None:
        for name in ("react_percentile", "ash_percentile"):
            if not 0 < getattr(self, name) < 100:
                raise UsageError(f"{name} must lie strictly between 0 and 100, got {getattr(self, name)}")
        if not self.gen_gamma > 0:
            raise UsageError(f"gen_gamma must be positive, got {self.gen_gamma}")
        for name in ("knn_k", "gen_top", "vim_dimension"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name} must be at least 1, got {value}")


def knn_k(n_fit: int) -> int:
    """KNN's default k for a fit set of `n_fit` samples: the paper's 50 per 50,000, rounded, at least 1."""
    return max(1, round(KNN_K * n_fit / KNN_K_FIT_SIZE))


def vim_dimension(feature_dim: int) -> int:
    """ViM's principal-space dimension for a feature dimension (Wang et al. 2022's code)."""
    for at_least, dimension in VIM_DIMENSIONS:
        if feature_dim >= at_least:
            return dimension
    return feature_dim // 2


class Detector(Protocol):
    """One fitted detector: scores row chunks of features and logits."""

    @property
    def width(self) -> int:
        """Elements per scored row of its largest intermediate array (sizes the chunks)."""
        ...

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray: ...

    def settings(self) -> dict[str, Any]:
        """What was fitted or chosen, JSON-ready."""
        ...


@dataclasses.dataclass(frozen=True)
class FittedDetectors:
    """The detectors fitted on one fit set, in the order asked for, and the one-line notes the report carries."""

    detectors: dict[str, Detector]
    described: tuple[str, ...]
    feature_dim: int

    def scores(self, features: np.ndarray, logits: np.ndarray) -> dict[str, np.ndarray]:
        """Each detector's (N,) float64 score of new samples (higher: more in-distribution)."""
        x = _features(features, "scored features")
        if x.shape[1] != self.feature_dim:
            raise InputError(f"scored features have {x.shape[1]} dimensions, the fit features {self.feature_dim}")
        z = _logits(logits, len(x), "scored")
        out = {}
        for name, detector in self.detectors.items():
            out[name] = np.concatenate(
                [detector.score_rows(x[rows], z[rows]) for rows in _chunks(len(x), detector.width)]
            )
            bad = np.flatnonzero(~np.isfinite(out[name]))
            if len(bad):
                raise InputError(
                    f"{name} gives a non-finite score for {len(bad)} samples (the first: sample {bad[0]}); "
                    f"leave {name} out for this model's features"
                )
        return out

    def notes(self) -> list[str]:
        """One-line statements of what was fitted and chosen (k, dimensions, thresholds, shrinkage)."""
        return list(self.described)

    def settings(self) -> dict[str, dict[str, Any]]:
        """Per detector, its fitted values, JSON-ready."""
        return {name: detector.settings() for name, detector in self.detectors.items()}


def fit_detectors(
    features: np.ndarray,
    labels: np.ndarray,
    logits: np.ndarray,
    head_weight: np.ndarray,
    head_bias: np.ndarray | None,
    names: Sequence[str] = DETECTORS,
    class_names: Sequence[str] | None = None,
    **options: Any,
) -> FittedDetectors:
    """Fit the detectors `names` on in-distribution features (N, D), labels (N,), logits (N, K) and the final
    layer's weight (K, D) and bias (K,) or None; `options` are DetectorOptions' fields."""
    unknown = [name for name in names if name not in _FITS]
    if unknown:
        raise UsageError(f"unknown feature OOD detector {unknown[0]!r}; known: {', '.join(DETECTORS)}")
    fields = [f.name for f in dataclasses.fields(DetectorOptions)]
    for option in options:
        if option not in fields:
            raise UsageError(f"unknown detector option {option!r}; known: {', '.join(fields)}")
    fit = _FitSet.of(features, labels, logits, head_weight, head_bias, DetectorOptions(**options), class_names)
    detectors, notes = {}, []
    for name in names:
        detectors[name], detector_notes = _FITS[name](fit)
        notes += detector_notes
    return FittedDetectors(detectors, tuple(dict.fromkeys(notes)), fit.features.shape[1])


# --- the fit set ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _FitSet:
    """The checked fit inputs and the statistics more than one detector reads (computed once, when first read)."""

    features: np.ndarray  # (N, D) float32 or float64, finite
    labels: np.ndarray  # (N,) int64 in [0, K)
    logits: np.ndarray  # (N, K) float64
    weight: np.ndarray  # (K, D) float64
    bias: np.ndarray  # (K,) float64
    options: DetectorOptions
    class_names: Sequence[str] | None

    @classmethod
    def of(  # noqa: PLR0913 (the fit inputs, each checked here)
        cls,
        features: np.ndarray,
        labels: np.ndarray,
        logits: np.ndarray,
        head_weight: np.ndarray,
        head_bias: np.ndarray | None,
        options: DetectorOptions,
        class_names: Sequence[str] | None,
    ) -> _FitSet:
        x = _features(features, "fit features")
        n, d = x.shape
        weight = np.asarray(head_weight, dtype=np.float64)
        if weight.ndim != 2 or weight.shape[1] != d:
            raise InputError(f"the final layer's weight has shape {weight.shape}, expected (K, {d}) for {d} features")
        k = len(weight)
        bias = np.zeros(k) if head_bias is None else np.asarray(head_bias, dtype=np.float64)
        if bias.shape != (k,):
            raise InputError(f"the final layer's bias has shape {bias.shape}, expected ({k},)")
        y = np.asarray(labels)
        if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
            raise InputError(f"fit labels: expected {n} integer labels, got shape {y.shape} of {y.dtype}")
        if n and (y.min() < 0 or y.max() >= k):
            raise InputError(
                f"fit labels must lie in [0, {k}) for the final layer's {k} outputs, got {y.min()}..{y.max()}"
            )
        z = _logits(logits, n, "fit")
        if z.shape[1] != k:
            raise InputError(f"fit logits have {z.shape[1]} classes, the final layer {k}")
        return cls(x, y.astype(np.int64), z, weight, bias, options, class_names)

    @functools.cached_property
    def gram(self) -> tuple[np.ndarray, np.ndarray]:
        """(sum of f, sum of f f^T) over the fit set, float64."""
        d = self.features.shape[1]
        total, second = np.zeros(d), np.zeros((d, d))
        for rows in _chunks(len(self.features), d):
            chunk = self.features[rows].astype(np.float64)
            total += chunk.sum(axis=0)
            second += chunk.T @ chunk
        return total, second

    @functools.cached_property
    def class_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(counts (K,), sums of f per class (K, D)); a class without a fit sample is refused."""
        k, d = self.weight.shape
        counts = np.bincount(self.labels, minlength=k)
        if (counts == 0).any():
            missing = int(np.flatnonzero(counts == 0)[0])
            names = self.class_names
            named = f" ({names[missing]})" if names is not None and missing < len(names) else ""
            raise InputError(
                f"the feature fit set has no sample of class {missing}{named}: Mahalanobis and RMDS fit a mean "
                "per class; give a fit set with every class or leave them out"
            )
        sums = np.zeros((k, d))
        for rows in _chunks(len(self.features), d):
            labels = self.labels[rows]
            order = np.argsort(labels, kind="stable")
            present, starts = np.unique(labels[order], return_index=True)
            sums[present] += np.add.reduceat(self.features[rows][order], starts, axis=0, dtype=np.float64)
        return counts, sums

    @functools.cached_property
    def class_gaussians(self) -> tuple[_Gaussians, list[str]]:
        """The class means with the shared covariance (Lee et al. 2018)."""
        counts, sums = self.class_sums
        n, d = self.features.shape
        means = sums / counts[:, None]
        scatter = self.gram[1] - sums.T @ means  # the class-centred features' sum of f f^T
        centre = self.gram[0] / n
        return _gaussians(
            centre,
            means,
            scatter / n,
            n - len(counts),
            lambda: self.features - means[self.labels],
            "the class covariance (mahalanobis, rmds)",
        )

    @functools.cached_property
    def background_gaussian(self) -> tuple[_Gaussians, list[str]]:
        """One Gaussian of every fit feature (Ren et al. 2021's background)."""
        total, second = self.gram
        n = len(self.features)
        centre = total / n
        covariance = second / n - np.outer(centre, centre)
        return _gaussians(
            centre, centre[None], covariance, n - 1, lambda: self.features - centre, "the background covariance (rmds)"
        )


def _features(features: np.ndarray, what: str) -> np.ndarray:
    """(N, D) float32 or float64 features, every value finite."""
    x = np.asarray(features)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise InputError(f"{what}: expected an array of shape (N, D), got {x.shape}")
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if len(bad):
        raise InputError(
            f"{what}: {len(bad)} samples have NaN or infinite features (the first: sample {bad[0]}); "
            "check the model's feature output"
        )
    return x


def _logits(logits: np.ndarray, n: int, what: str) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or len(z) != n or z.shape[1] < 1:
        raise InputError(f"{what} logits: expected shape ({n}, K), got {z.shape}")
    if not np.isfinite(z).all():
        raise InputError(f"{what} logits hold NaN or infinite values")
    return z


def _eigh(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.linalg.eigh with BLAS on one thread: LAPACK's eigensolver through OpenBLAS's threads ran 7 to 50 times
    slower than on one (512 and 2,048 dimensions, two busy cores), its threads spinning between small calls."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        return np.linalg.eigh(matrix)


def _chunks(n: int, width: int) -> Iterator[slice]:
    """Row slices of at most CHUNK_ELEMENTS // width rows (at least one)."""
    rows = max(1, CHUNK_ELEMENTS // max(1, width))
    for start in range(0, n, rows):
        yield slice(start, min(n, start + rows))


# --- Gaussians: Mahalanobis and RMDS -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Gaussians:
    """Means sharing one covariance, kept whitened: d_k(f) = ||(f - centre) A - m_k||^2, A = V diag(lambda)^-1/2."""

    centre: np.ndarray  # (D,) where the features are shifted before whitening (precision, not meaning)
    whiten: np.ndarray  # (D, D)
    means: np.ndarray  # (K, D) whitened means, about the centre
    shrinkage: float  # Ledoit-Wolf coefficient, 0 for the covariance as estimated

    def min_distance(self, features: np.ndarray) -> np.ndarray:
        """min_k of the squared Mahalanobis distances to the means."""
        w = (features.astype(np.float64) - self.centre) @ self.whiten
        d = (w**2).sum(axis=1)[:, None] - 2 * w @ self.means.T + (self.means**2).sum(axis=1)[None, :]
        return d.min(axis=1)


def _gaussians(  # noqa: PLR0913 (one covariance's inputs)
    centre: np.ndarray,
    means: np.ndarray,
    covariance: np.ndarray,
    rank_bound: int,
    centred: Callable[[], np.ndarray],
    what: str,
) -> tuple[_Gaussians, list[str]]:
    """Whitened Gaussians, the covariance shrunk (Ledoit-Wolf on `centred()`, the centred fit features) where its
    rank is below its dimension: `rank_bound` (fit samples less means) below it, or an eigenvalue numerically 0."""
    eigenvalues, vectors = _eigh(covariance)
    d = len(eigenvalues)
    tiny = d * np.finfo(np.float64).eps
    if eigenvalues[-1] <= 0:
        raise InputError("the fit features do not vary: Mahalanobis and RMDS need a covariance")
    shrinkage, notes = 0.0, []
    if rank_bound < d or eigenvalues[0] <= tiny * eigenvalues[-1]:
        from sklearn.covariance import ledoit_wolf_shrinkage

        shrinkage = float(ledoit_wolf_shrinkage(centred(), assume_centered=True))
        eigenvalues = (1 - shrinkage) * np.maximum(eigenvalues, 0) + shrinkage * np.maximum(eigenvalues, 0).mean()
        if eigenvalues[0] <= tiny * eigenvalues[-1]:
            raise InputError(f"{what} of the fit features is singular even after shrinkage")
        reason = f"{rank_bound} degrees of freedom" if rank_bound < d else "a direction without variance"
        notes.append(
            f"{what}: rank below its {d} dimensions ({reason}); "
            f"Ledoit-Wolf shrinkage {shrinkage:.4g} toward a scaled identity"
        )
    whiten = vectors / np.sqrt(eigenvalues)
    return _Gaussians(centre, whiten, (means - centre) @ whiten, shrinkage), notes


@dataclasses.dataclass(frozen=True)
class _Mahalanobis:
    classes: _Gaussians

    @property
    def width(self) -> int:
        return max(self.classes.means.shape)

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        return -self.classes.min_distance(features)

    def settings(self) -> dict[str, Any]:
        return {"covariance_shrinkage": self.classes.shrinkage}


@dataclasses.dataclass(frozen=True)
class _RelativeMahalanobis:
    classes: _Gaussians
    background: _Gaussians

    @property
    def width(self) -> int:
        return max(self.classes.means.shape)

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        # -min_k (d_k - d_0) = d_0 - min_k d_k
        return self.background.min_distance(features) - self.classes.min_distance(features)

    def settings(self) -> dict[str, Any]:
        return {"covariance_shrinkage": self.classes.shrinkage, "background_shrinkage": self.background.shrinkage}


def _fit_mahalanobis(fit: _FitSet) -> tuple[Detector, list[str]]:
    classes, notes = fit.class_gaussians
    return _Mahalanobis(classes), notes


def _fit_rmds(fit: _FitSet) -> tuple[Detector, list[str]]:
    (classes, class_notes), (background, background_notes) = fit.class_gaussians, fit.background_gaussian
    return _RelativeMahalanobis(classes, background), class_notes + background_notes


# --- KNN -----------------------------------------------------------------------------------------------------


def _unit(features: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm in float64 (a zero row stays zero: the norm is floored at 1e-12)."""
    x = features.astype(np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1), 1e-12)[:, None]


@dataclasses.dataclass(frozen=True)
class _KNN:
    k: int
    fit: np.ndarray  # (M, D) the fit features as given
    inverse_norm: np.ndarray  # (M,) float64, 1 / max(||f||, 1e-12)
    unit_squared: np.ndarray  # (M,) float64, ||f / max(||f||, 1e-12)||^2: 1, or 0 for a zero row
    unit32: np.ndarray  # (M, D) float32, for the search

    @property
    def candidates(self) -> int:
        return min(len(self.fit), self.k + KNN_CANDIDATES)

    @property
    def width(self) -> int:
        return max(len(self.fit), self.candidates * self.fit.shape[1])

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        query = _unit(features)
        c = self.candidates
        similarity = query.astype(np.float32) @ self.unit32.T  # (rows, M)
        nearest = _most_similar(similarity, c)  # by float32, measured again in float64
        del similarity
        dot = np.einsum("rcd,rd->rc", self.fit[nearest], query, dtype=np.float64) * self.inverse_norm[nearest]
        squared = (query**2).sum(axis=1)[:, None] + self.unit_squared[nearest] - 2 * dot
        kth = np.partition(squared, self.k - 1, axis=1)[:, self.k - 1]
        return -np.sqrt(np.maximum(kth, 0))  # a fit feature scored again: 0 less rounding

    def settings(self) -> dict[str, Any]:
        return {"k": self.k, "fit_samples": len(self.fit)}


def _most_similar(similarity: np.ndarray, c: int) -> np.ndarray:
    """The columns of each row's c largest values, (rows, c), in no order (ties broken arbitrarily).

    Exact: a group holding one of the c largest has a maximum at least the c-th largest, so it is among the c groups
    of largest maxima. Partitioning those groups' c * KNN_GROUP columns instead of all M is ~7x faster on 50,000."""
    rows, m = similarity.shape
    groups = m // KNN_GROUP
    if groups < 4 * c:  # too few groups to save anything
        return np.argpartition(similarity, m - c, axis=1)[:, m - c :]
    dealt = similarity[:, : groups * KNN_GROUP].reshape(rows, KNN_GROUP, groups)  # group j: columns j, j + groups, ...
    best_groups = np.argpartition(dealt.max(axis=1), groups - c, axis=1)[:, groups - c :]
    columns = (best_groups[:, None, :] + groups * np.arange(KNN_GROUP)[:, None]).reshape(rows, c * KNN_GROUP)
    if m > groups * KNN_GROUP:  # the columns left over from the dealing are always candidates
        left_over = np.broadcast_to(np.arange(groups * KNN_GROUP, m), (rows, m - groups * KNN_GROUP))
        columns = np.concatenate([columns, left_over], axis=1)
    values = np.take_along_axis(similarity, columns, axis=1)
    picked = np.argpartition(values, values.shape[1] - c, axis=1)[:, values.shape[1] - c :]
    return np.take_along_axis(columns, picked, axis=1)


def _fit_knn(fit: _FitSet) -> tuple[Detector, list[str]]:
    n = len(fit.features)
    k = fit.options.knn_k if fit.options.knn_k is not None else knn_k(n)
    if k > n:
        raise InputError(f"knn: k = {k} exceeds the {n} fit samples; give a smaller k or more fit data")
    chunks = list(_chunks(n, fit.features.shape[1]))
    norm = np.concatenate([np.linalg.norm(fit.features[rows].astype(np.float64), axis=1) for rows in chunks])
    inverse_norm = 1 / np.maximum(norm, 1e-12)
    unit32 = np.concatenate([(fit.features[rows] * inverse_norm[rows, None]).astype(np.float32) for rows in chunks])
    rule = "as given" if fit.options.knn_k is not None else f"{KNN_K} per {KNN_K_FIT_SIZE:,} fit samples, at least 1"
    detector = _KNN(k, fit.features, inverse_norm, (norm * inverse_norm) ** 2, unit32)
    return detector, [f"knn: k = {k} ({rule}) over {n:,} fit samples, L2-normalised features"]


# --- ViM -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _ViM:
    origin: np.ndarray  # (D,) -pinv(W) b
    residual: np.ndarray  # (D, D - dimension) the residual space's orthonormal basis
    alpha: float
    dimension: int

    @property
    def width(self) -> int:
        return len(self.origin)

    def residual_norm(self, features: np.ndarray) -> np.ndarray:
        return np.linalg.norm((features.astype(np.float64) - self.origin) @ self.residual, axis=1)

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        return energy(logits) - self.alpha * self.residual_norm(features)

    def settings(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "alpha": self.alpha}


def _fit_vim(fit: _FitSet) -> tuple[Detector, list[str]]:
    n, d = fit.features.shape
    dimension = fit.options.vim_dimension if fit.options.vim_dimension is not None else vim_dimension(d)
    if not 1 <= dimension < d:
        raise InputError(
            f"vim: a principal space of {dimension} dimensions needs more than {dimension} features, got {d}"
        )
    origin = -np.linalg.pinv(fit.weight) @ fit.bias
    total, second = fit.gram
    mean = total / n
    # the second moment about the origin: E[(f - o)(f - o)^T]
    moment = second / n - np.outer(mean, origin) - np.outer(origin, mean) + np.outer(origin, origin)
    _, vectors = _eigh(moment)  # ascending: the residual space is the first D - dimension eigenvectors
    unscaled = _ViM(origin, vectors[:, : d - dimension], 1.0, dimension)
    residuals = np.concatenate([unscaled.residual_norm(fit.features[rows]) for rows in _chunks(n, d)])
    alpha = float(fit.logits.max(axis=1).mean() / residuals.mean())
    note = (
        f"vim: principal space of {dimension} of {d} dimensions, about -pinv(W) b; "
        f"alpha = {alpha:.4g} (mean max logit / mean residual norm of the fit set)"
    )
    return dataclasses.replace(unscaled, alpha=alpha), [note]


# --- activation shaping: ReAct, ASH-S ------------------------------------------------------------------------


def _percentile(values: np.ndarray, q: float) -> float:
    """np.percentile's default (linear) rule in float64, with a partition of `values` (no float64 copy)."""
    flat = values.ravel()
    position = q / 100 * (flat.size - 1)
    low = int(np.floor(position))
    high = min(low + 1, flat.size - 1)
    part = np.partition(flat, [low, high])
    return float(part[low]) + (position - low) * (float(part[high]) - float(part[low]))


@dataclasses.dataclass(frozen=True)
class _ReAct:
    threshold: float
    percentile: float
    weight: np.ndarray
    bias: np.ndarray

    @property
    def width(self) -> int:
        return max(self.weight.shape)

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        clipped = np.minimum(features.astype(np.float64), self.threshold)
        return energy(clipped @ self.weight.T + self.bias)

    def settings(self) -> dict[str, Any]:
        return {"percentile": self.percentile, "threshold": self.threshold}


def _negative_note(fit: _FitSet, name: str) -> list[str]:
    if fit.features.min() >= 0:
        return []
    return [f"{name}: the fit features take negative values; activation shaping assumes non-negative (ReLU) ones"]


def _fit_react(fit: _FitSet) -> tuple[Detector, list[str]]:
    p = fit.options.react_percentile
    threshold = _percentile(fit.features, p)
    note = f"react: activations clipped at {threshold:.6g}, the {p:g}th percentile of the fit features"
    return _ReAct(threshold, p, fit.weight, fit.bias), [note, *_negative_note(fit, "react")]


@dataclasses.dataclass(frozen=True)
class _ASH:
    keep: int  # activations kept per sample
    percentile: float
    weight: np.ndarray
    bias: np.ndarray

    @property
    def width(self) -> int:
        return max(self.weight.shape)

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        x = features.astype(np.float64)
        d = x.shape[1]
        top = np.argpartition(x, d - self.keep, axis=1)[:, d - self.keep :]
        pruned = np.zeros_like(x)
        np.put_along_axis(pruned, top, np.take_along_axis(x, top, axis=1), axis=1)
        before, after = x.sum(axis=1), pruned.sum(axis=1)
        # nothing kept above 0: the shaped features are 0 whatever the scale
        scale = np.divide(before, after, out=np.zeros_like(before), where=after != 0)
        return energy((pruned * np.exp(scale)[:, None]) @ self.weight.T + self.bias)

    def settings(self) -> dict[str, Any]:
        return {"percentile": self.percentile, "kept": self.keep}


def _fit_ash(fit: _FitSet) -> tuple[Detector, list[str]]:
    p, d = fit.options.ash_percentile, fit.features.shape[1]
    keep = max(1, d - int(np.round(d * p / 100)))  # the paper's code's rounding
    note = f"ash_s: keeps the top {keep} of {d} activations per sample ({p:g}% pruned), scaled by exp(s1/s2)"
    return _ASH(keep, p, fit.weight, fit.bias), [note, *_negative_note(fit, "ash_s")]


# --- GEN -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _GEN:
    gamma: float
    top: int
    classes: int

    @property
    def width(self) -> int:
        return self.classes

    def score_rows(self, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
        return gen_scores(logits, self.gamma, self.top)

    def settings(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "top_classes": min(self.top, self.classes)}


def _fit_gen(fit: _FitSet) -> tuple[Detector, list[str]]:
    k, o = len(fit.weight), fit.options
    return _GEN(o.gen_gamma, o.gen_top, k), [f"gen: gamma = {o.gen_gamma:g} over the top {min(o.gen_top, k)} classes"]


_FITS: dict[str, Callable[[_FitSet], tuple[Detector, list[str]]]] = {
    "mahalanobis": _fit_mahalanobis,
    "rmds": _fit_rmds,
    "knn": _fit_knn,
    "vim": _fit_vim,
    "react": _fit_react,
    "ash_s": _fit_ash,
    "gen": _fit_gen,
}
