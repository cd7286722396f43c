"""Chance on a subset of the model's outputs: where the metrics are restricted to the data's classes
(data.class_matching.restricted), the model chooses among the data's K classes, so chance is 1/K of them, not
1/K of the model's outputs (formats/summary.py, `chance`)."""

from fixtures.synthetic_report import synthetic_report

from macs_audit.formats.summary import chance, summarize


def subset_report(restricted: bool, per_class: bool):
    """A 1,000-output model scored on 20 of its classes at 6% accuracy, [4.5%, 7.5%]: above 1/1000, not 1/20."""
    report = synthetic_report(accuracy=0.06, ece=0.01, corruptions=[], n=1000)
    report.robustness = None  # the chance finding alone
    report.views = []
    report.clean.predictions = None
    report.clean.intervals = {"accuracy": [0.045, 0.075]}
    report.model.num_classes = 1000
    report.data.num_classes = 20
    report.data.class_names = [f"c{k}" for k in range(20)]
    report.data.class_matching = {
        "by": "name",
        "mapped_by": "the model's class names",
        "num_outputs": 1000,
        "outputs": list(range(0, 1000, 50)),
        "restricted": restricted,
    }
    report.clean.per_class = [{"class": k, "name": f"c{k}", "n": 50} for k in range(20)] if per_class else None
    return report


def test_chance_on_restricted_metrics_is_one_over_the_datas_classes():
    assert chance(subset_report(restricted=True, per_class=False)) == (1 / 20, "1/20")
    # The equal shares of the 20 classes are the same 5%: named as 1/K, the K the model chooses among.
    assert chance(subset_report(restricted=True, per_class=True)) == (1 / 20, "1/20")
    (problem,) = summarize(subset_report(restricted=True, per_class=False)).problems
    assert problem.startswith("accuracy 6.00% not above chance 5.00% (1/20;"), problem


def test_chance_over_every_output_is_one_over_the_models_outputs():
    """Metrics over every output (not restricted): a 6% model beats 1/1000 by far."""
    report = subset_report(restricted=False, per_class=False)
    assert chance(report) == (1 / 1000, "1/1000")
    assert summarize(report).problems == ()
