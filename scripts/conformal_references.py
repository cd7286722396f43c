"""The conformal sets of the sample model against MAPIE and TorchCP (benchmarks/RESULTS.md, "Conformal sets").

    python scripts/conformal_references.py [--seeds 20]

The sample CIFAR-10 model on a class-stratified 2,000-image subset of the built-in test set, split in two
class-stratified halves (fit, scored), as tests/metrics/test_conformal.py does; coverage 0.9. For each seed:
our randomised APS (threshold, mean set size), TorchCP's APS() and MAPIE's APS with include_last_label
"randomized"; then the deterministic APS and every reported method for seed 0. TorchCP's score modules are
loaded by file (its package __init__ imports torchsort and torch_geometric, which the scores do not use).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np


def torchcp():
    root = Path(importlib.util.find_spec("torchcp").origin).parent
    for name, path in (("torchcp", root), ("torchcp.classification", root / "classification")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules.setdefault(name, module)
    from torchcp.classification.score.aps import APS
    from torchcp.utils.common import calculate_conformal_value

    return APS, calculate_conformal_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    import torch
    from mapie.classification import SplitConformalClassifier
    from sklearn.base import BaseEstimator, ClassifierMixin

    from macs_audit.data.sources import load_source
    from macs_audit.data.splits import stratified_split, stratified_subset
    from macs_audit.metrics import conformal
    from macs_audit.metrics.conventions import softmax_with_log
    from macs_audit.models.predictor import load_predictor

    class Given(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.arange(x.shape[1])
            return self

        def predict_proba(self, x):
            return x

        def predict(self, x):
            return x.argmax(axis=1)

    source = load_source(None)
    source = source.subset(stratified_subset(source.labels, 2000, seed=0))
    predictor = load_predictor(Path(__file__).resolve().parents[1] / "sample_models" / "resnet9_c10_ce.onnx")
    images = source.images(np.arange(len(source)))
    z = np.concatenate(
        [predictor.predict((images[i : i + 250] / np.float32(255)).transpose(0, 3, 1, 2)) for i in range(0, 2000, 250)]
    ).astype(np.float64)
    y = np.asarray(source.labels)
    fit, held = stratified_split(y, 0.5, seed=0)
    zc, yc, zt, yt = z[fit], y[fit], z[held], y[held]
    pc, pt = softmax_with_log(zc)[0], softmax_with_log(zt)[0]
    APS, calculate_conformal_value = torchcp()
    rows = {"ours": [], "TorchCP": [], "MAPIE": []}
    for seed in range(args.seeds):
        thresholds = conformal.fit_thresholds(zc, yc, 0.9, seed=seed)
        stats = conformal.evaluate_sets(zt, yt, thresholds)["aps"]
        rows["ours"].append((float(thresholds["aps"]), stats["mean_set_size"], stats["coverage"]))
        torch.manual_seed(seed)
        aps = APS()
        q = float(calculate_conformal_value(aps(torch.tensor(zc), torch.tensor(yc)), 0.1))
        sets = (aps(torch.tensor(zt)) <= q).numpy()
        rows["TorchCP"].append((q, sets.sum(1).mean(), sets[np.arange(len(yt)), yt].mean()))
        mapie = SplitConformalClassifier(
            Given().fit(pc, yc), confidence_level=0.9, conformity_score="aps", prefit=True, random_state=seed
        )
        mapie.conformalize(pc, yc)
        fitted = mapie._mapie_classifier
        q = float(
            np.ravel(
                fitted.conformity_score_function_.get_conformity_score_quantiles(
                    fitted.conformity_scores_, np.array([0.1]), "prefit"
                )
            )[0]
        )
        sets = mapie.predict_set(pt, conformity_score_params={"include_last_label": "randomized"})[1][:, :, 0]
        rows["MAPIE"].append((q, sets.sum(1).mean(), sets[np.arange(len(yt)), yt].mean()))
    print(f"randomised APS, {args.seeds} seeds (mean ± std): threshold, mean set size, coverage")
    for name, values in rows.items():
        a = np.array(values)
        print(f"  {name:8s} " + "  ".join(f"{a[:, i].mean():.4f} ± {a[:, i].std():.4f}" for i in range(3)))
    q = conformal.conformal_threshold(conformal.true_class_scores(pc, yc, "aps_deterministic"), 0.9)
    sets = conformal.prediction_sets(pt, q, "aps_deterministic")
    stats = conformal.set_statistics(sets, yt)
    print(
        f"deterministic APS: coverage {stats['coverage']:.4f}, mean set size {stats['mean_set_size']:.4f}, "
        f"empty sets {(sets.sum(1) == 0).mean():.4f}"
    )
    for method, stats in conformal.evaluate_sets(zt, yt, conformal.fit_thresholds(zc, yc, 0.9)).items():
        low, high = stats["coverage_interval"]
        print(
            f"  {method}: coverage {stats['coverage']:.4f} [{low:.4f}, {high:.4f}], size {stats['mean_set_size']:.4f}"
        )


if __name__ == "__main__":
    main()
