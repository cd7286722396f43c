"""The corruption summary: means per corruption, family and severity; mCE and CE."""

import numpy as np
import pytest

from macs_audit.metrics import corruption_summary
from macs_audit.report import ViewResult
from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, EXTRA_CORRUPTIONS


def summarize_corruptions(views, clean_accuracy, baseline=None):
    """The summary with the table's benchmark and extra corruptions, as the audit passes them."""
    return corruption_summary.summarize_corruptions(
        views, clean_accuracy, baseline, benchmark=BENCHMARK_CORRUPTIONS, extras=EXTRA_CORRUPTIONS
    )


def corruption_views(acc_by_key):
    from macs_audit.views.corruptions.table import FAMILIES

    return [
        ViewResult(
            name=f"{c}@{s}",
            kind="corruption",
            metrics={"accuracy": a, "ece": 0.1, "nll": 1.0, "brier": 0.5},
            corruption=c,
            severity=s,
            family=FAMILIES[c],
        )
        for (c, s), a in acc_by_key.items()
    ]


def test_corruption_summary_means_and_mce():
    from macs_audit.report import Conventions, DataInfo, ModelInfo, Report, Runtime
    from macs_audit.views.corruptions.table import CORRUPTIONS

    acc = {(c, s): 0.9 - 0.1 * s + 0.01 * i for i, c in enumerate(CORRUPTIONS) for s in (1, 2, 3, 4, 5)}
    summary = summarize_corruptions(corruption_views(acc), clean_accuracy=0.95)
    mean15 = np.mean([acc[c, s] for c in BENCHMARK_CORRUPTIONS for s in range(1, 6)])
    assert summary["mean_accuracy_15"] == pytest.approx(mean15)
    assert summary["mean_accuracy_19"] == pytest.approx(np.mean(list(acc.values())))
    assert summary["mean_corruption_error_unnormalized"] == pytest.approx(1 - mean15)
    assert (
        summary["corruptions"]["speckle_noise"]["extra"] and summary["families"]["weather"]["corruptions"][0] == "snow"
    )
    # A baseline with twice our error everywhere: CE = 0.5 for every corruption.
    base_acc = {k: 1 - 2 * (1 - a) for k, a in acc.items()}
    baseline = Report(
        model=ModelInfo(),
        data=DataInfo(),
        runtime=Runtime(),
        conventions=Conventions(),
        seeds={},
        clean=ViewResult("clean", "clean", {"accuracy": 0.9}),
        views=corruption_views(base_acc),
    )
    summary = summarize_corruptions(corruption_views(acc), 0.95, baseline)
    assert summary["mean_corruption_error"] == pytest.approx(0.5)
    c = "gaussian_noise"
    rel = sum((1 - acc[c, s]) - 0.05 for s in range(1, 6)) / sum((1 - base_acc[c, s]) - 0.1 for s in range(1, 6))
    assert summary["relative_ce"][c] == pytest.approx(rel)


def test_partial_grid_has_no_benchmark_means():
    summary = summarize_corruptions(corruption_views({("fog", 1): 0.5, ("fog", 2): 0.3}), 0.9)
    assert "mean_accuracy_15" not in summary and summary["mean_accuracy_selected"] == pytest.approx(0.4)


def test_alexnet_normalisation_uses_the_published_imagenet_c_errors():
    """AlexNet's table (metrics/alexnet.py) holds all 19 corruptions; its per-corruption means are the
    published averages; a model with exactly AlexNet's errors has CE 1 on every benchmark corruption."""
    from types import SimpleNamespace

    from macs_audit.metrics import alexnet
    from macs_audit.metrics.corruption_summary import alexnet_errors
    from macs_audit.views.corruptions.table import CORRUPTIONS

    assert set(alexnet.ERRORS) == set(CORRUPTIONS)
    assert np.mean(alexnet.ERRORS["gaussian_noise"]) == pytest.approx(0.886428, abs=1e-9)
    assert np.mean(alexnet.ERRORS["saturate"]) == pytest.approx(0.658248, abs=1e-9)
    views = [
        SimpleNamespace(corruption=name, severity=s, metrics={"accuracy": 1 - error})
        for (name, s), error in alexnet.errors_by_cell().items()
    ]
    result = alexnet_errors(views, 1 - alexnet.CLEAN_ERROR, BENCHMARK_CORRUPTIONS)
    assert sorted(result["ce"]) == sorted(BENCHMARK_CORRUPTIONS)
    assert all(v == pytest.approx(1.0) for v in result["ce"].values())
    assert result["mean_corruption_error"] == pytest.approx(1.0)
    assert result["relative_mean_corruption_error"] == pytest.approx(1.0)
    assert "torchvision" in result["baseline"]["clean_error_source"]
