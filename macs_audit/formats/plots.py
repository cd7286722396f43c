"""Plots for the HTML report, as PNG bytes (matplotlib, Agg, imported lazily).

Figures are built with matplotlib.figure.Figure directly, not pyplot: no global state, no GUI
backend, safe to call from any thread. Each function returns None when its data is absent.
"""

from __future__ import annotations

import io

from macs_audit.metrics.registry import METRICS
from macs_audit.report import Report, ViewResult
from macs_audit.text import printable

DPI = 100
_ACCURACY, _ECE, _CONFIDENCE = METRICS["accuracy"], METRICS["ece"], METRICS["mean_confidence"]


def _figure(width: float, height: float, **kwargs):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained", **kwargs)


def _text(value: object) -> str:
    """A report string as literal plot text: unprintable characters escaped (macs_audit.text), and '$', which
    would otherwise start matplotlib mathtext."""
    return printable(value).replace("$", r"\$")


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})  # no version string: stable bytes
    return buffer.getvalue()


def reliability(
    view: ViewResult, label: str | None = None, other: ViewResult | None = None, other_label: str | None = None
) -> bytes | None:
    """Reliability diagram (accuracy vs confidence per bin) above the confidence histogram.

    With `other`, both views are drawn (for `compare`).
    """
    rel = view.reliability
    if rel is None or not rel.count:
        return None
    fig = _figure(6.0, 5.6)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    width = rel.edges[1] - rel.edges[0]
    series = [(view, rel, _text(label or view.name), "#3366cc")]
    if other is not None and other.reliability:
        series.append((other, other.reliability, _text(other_label or other.name), "#dd7722"))
    offset = width / len(series)
    top.plot([0, 1], [0, 1], color="#888888", linestyle="--", linewidth=1, label="perfect calibration")
    for i, (v, r, name, color) in enumerate(series):
        left = [e + i * offset for e in r.edges[:-1]]
        acc = [a if a is not None else 0.0 for a in r.accuracy]
        conf = r.mean_confidence
        top.bar(
            left,
            acc,
            width=offset,
            align="edge",
            color=color,
            alpha=0.75,
            edgecolor="white",
            label=f"{name}: {_ACCURACY.label} ({_ECE.label} {100 * v.metrics.get('ece', float('nan')):.2f}%)",
        )
        if len(series) == 1:  # the gap to the diagonal, at each bin's mean confidence
            for x, a, c in zip(left, r.accuracy, conf, strict=True):
                if a is not None and c is not None:
                    top.bar(
                        x,
                        c - a,
                        bottom=a,
                        width=offset,
                        align="edge",
                        color="#cc3333",
                        alpha=0.25,
                        edgecolor="#cc3333",
                        hatch="//",
                        linewidth=0.5,
                    )
        total = max(sum(r.count), 1)
        bottom.bar(
            left,
            [c / total for c in r.count],
            width=offset,
            align="edge",
            color=color,
            alpha=0.75,
            edgecolor="white",
            label=name,
        )
    if len(series) == 1:
        acc_all, conf_all = view.metrics.get("accuracy"), view.metrics.get("mean_confidence")
        if acc_all is not None:
            bottom.axvline(
                acc_all, color="#222222", linestyle="-", linewidth=1.2, label=f"{_ACCURACY.label} {100 * acc_all:.1f}%"
            )
        if conf_all is not None:
            bottom.axvline(
                conf_all,
                color="#cc3333",
                linestyle="--",
                linewidth=1.2,
                label=f"{_CONFIDENCE.label} {100 * conf_all:.1f}%",
            )
    smooth = view.smooth_reliability if len(series) == 1 else None
    if smooth:  # the smoothed curve behind smooth ECE, at its bandwidth
        points = [(t, a) for t, a in zip(smooth["confidence"], smooth["accuracy"], strict=True) if a is not None]
        top.plot(
            [t for t, _ in points],
            [a for _, a in points],
            color="#111111",
            linewidth=1.6,
            label=f"smoothed (smooth ECE {100 * view.metrics.get('smooth_ece', float('nan')):.2f}%, "
            f"sigma {smooth['sigma']:.3f})",
        )
    top.set(xlim=(0, 1), ylim=(0, 1), ylabel="accuracy in bin", title="Reliability diagram (15 equal-width bins)")
    top.legend(loc="upper left", fontsize=8)
    bottom.set(
        xlabel="confidence (max softmax probability)", ylabel="fraction of samples", title="Confidence histogram"
    )
    bottom.legend(loc="upper left", fontsize=8)
    return _png(fig)


def margin_histogram(report: Report) -> bytes | None:
    hist = report.margin_histogram
    if hist is None or not hist.counts:
        return None
    edges, counts = hist.edges, hist.counts
    fig = _figure(6.0, 3.2)
    ax = fig.subplots()
    widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    colors = ["#cc3333" if right <= 0 else "#3366cc" for right in edges[1:]]
    ax.bar(edges[:-1], counts, width=widths, align="edge", color=colors, alpha=0.8, edgecolor="white")
    target = report.conventions.margin_target
    ax.axvline(0, color="#222222", linewidth=1, label="0 (misclassified to the left)")
    if isinstance(target, (int, float)):
        ax.axvline(target, color="#dd7722", linestyle="--", linewidth=1, label=f"margin target {target:g}")
    ax.set(xlabel="logit margin z[y] - max other z", ylabel="samples", title="Logit margin histogram (clean)")
    ax.legend(fontsize=8)
    return _png(fig)


def ood_histograms(report: Report) -> bytes | None:
    """Each OOD score's histogram, the evaluation images (in) against the OOD set (out), one small panel a score."""
    ood = report.ood
    if ood is None or not ood.histograms:
        return None
    names = list(ood.histograms)
    columns = min(3, len(names))
    rows = -(-len(names) // columns)
    fig = _figure(3.0 * columns, 2.2 * rows)
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        hist = ood.histograms[name]
        edges = hist["edges"]
        widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
        ax.bar(edges[:-1], hist["in"], width=widths, align="edge", color="#3366cc", alpha=0.6, label="in")
        ax.bar(edges[:-1], hist["out"], width=widths, align="edge", color="#cc3333", alpha=0.6, label="out")
        auroc = ood.scores.get(name, {}).get("auroc")
        ax.set_title(f"{_text(name)}" + (f" (AUROC {auroc:.3f})" if isinstance(auroc, float) else ""), fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6)
    return _png(fig)


def corruption_heatmap(report: Report) -> bytes | None:
    """Accuracy and ECE per corruption (rows) and severity (columns), side by side (corruption_figure)."""
    fig = corruption_figure(report)
    return None if fig is None else _png(fig)


def corruption_figure(report: Report):
    """The heat maps' figure: each cell annotated and each colour bar in percent, accuracy on 0-100%, ECE on
    0 to the grid's largest (low ECE is good: light)."""
    from macs_audit.formats.tables import corruption_grid

    names, severities, cells = corruption_grid(report)
    if not names:
        return None
    import numpy as np

    grids = {key: np.full((len(names), len(severities)), np.nan) for key in ("accuracy", "ece")}
    for i, name in enumerate(names):
        for j, severity in enumerate(severities):
            view = cells.get((name, severity))
            for key, grid in grids.items():
                if view is not None and view.metrics.get(key) is not None:
                    grid[i, j] = 100 * view.metrics[key]
    fig = _figure(2 * (0.9 * len(severities) + 2.6), 0.32 * len(names) + 1.4)
    panels = fig.subplots(1, 2, sharey=True)
    ece_top = float(np.nanmax(grids["ece"])) if np.isfinite(grids["ece"]).any() else 1.0
    scales = {"accuracy": ("viridis", 0.0, 100.0), "ece": ("Reds", 0.0, max(ece_top, 1.0))}
    for ax, (key, grid) in zip(panels, grids.items(), strict=True):
        cmap, low, high = scales[key]
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=low, vmax=high, aspect="auto")
        middle = (low + high) / 2
        for i in range(len(names)):
            for j in range(len(severities)):
                if not np.isnan(grid[i, j]):
                    dark = grid[i, j] < 0.6 * high if key == "accuracy" else grid[i, j] > middle
                    color = "white" if dark else "black"
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7, color=color)
        ax.set_xticks(range(len(severities)), [str(s) for s in severities])
        label = f"{METRICS[key].label} (%)"
        ax.set(xlabel="severity", title=f"{label} by corruption and severity")
        fig.colorbar(image, ax=ax, label=label, fraction=0.05)
    panels[0].set_yticks(range(len(names)), [_text(n) for n in names], fontsize=8)
    return fig


def risk_coverage(view: ViewResult) -> bytes | None:
    """Selective risk against coverage (the view's `risk_coverage` curve), with the oracle ranking's curve at
    the same accuracy: no error is kept until every correct prediction is."""
    curve = view.risk_coverage
    if not curve or not curve.get("coverage"):
        return None
    coverage, risk = [100 * c for c in curve["coverage"]], [100 * r for r in curve["risk"]]
    error = curve["risk"][-1]  # at full coverage: the error rate
    oracle = [100 * max(0.0, 1 - (1 - error) / c) for c in curve["coverage"]]
    fig = _figure(6.0, 4.2)
    ax = fig.subplots()
    ax.plot(coverage, risk, color="#3366cc", linewidth=2, label="model (max softmax)")
    ax.plot(coverage, oracle, color="#888888", linestyle="--", linewidth=1, label="oracle ranking")
    ax.set_xlabel("coverage (%)")
    ax.set_ylabel("selective risk: error rate kept (%)")
    ax.set_xlim(0, 100)
    ax.set_ylim(0, max(1.0, 1.1 * max(risk)))
    ax.grid(True, linestyle=":", alpha=0.6)
    ax.legend(loc="upper left")
    return _png(fig)


SLICE_BARS = 40  # the slices drawn (the worst accuracy gaps first): a chart of more is unreadable


def slice_ece(report: Report) -> bytes | None:
    """Each scored slice's ECE as a horizontal bar with its 95% interval, the slices in the section's order (the
    worst accuracy gap on top, the first SLICE_BARS), those significantly worse than the rest in red and better in
    green, the whole data's ECE as a line."""
    section = report.slices
    if section is None or not section.slices:
        return None
    shown = section.slices[:SLICE_BARS]
    from macs_audit.report import slice_label

    ece = [100 * s.metrics.get("ece", float("nan")) for s in shown]
    fig = _figure(6.5, 0.3 * len(shown) + 1.3)
    ax = fig.subplots()
    rows = list(range(len(shown)))
    # Red: significantly worse than the rest; green: significantly better (often a worse slice's complement).
    colours = ["#cc3333" if s.worse() else "#339933" if s.significant else "#3366cc" for s in shown]
    ax.barh(rows, ece, color=colours, alpha=0.8)
    # Each interval drawn from its bounds (a bias-corrected interval need not hold its point estimate).
    ends = [(i, s.intervals["ece"]) for i, s in zip(rows, shown, strict=True) if s.intervals.get("ece")]
    if ends:
        at, low, high = [i for i, _ in ends], [100 * ci[0] for _, ci in ends], [100 * ci[1] for _, ci in ends]
        ax.hlines(at, low, high, color="#222222", linewidth=1)
        ax.scatter(low + high, at + at, marker="|", color="#222222", s=30)
    ax.set_yticks(rows, [_text(slice_label(s.column, s.value)) for s in shown], fontsize=8)
    ax.invert_yaxis()  # the first slice on top, as in the table
    whole = report.clean.metrics.get("ece")
    if isinstance(whole, (int, float)):
        ax.axvline(100 * whole, color="#222222", linestyle="--", linewidth=1, label=f"all images {100 * whole:.2f}%")
        ax.legend(loc="best", fontsize=8)
    more = f" (the first {len(shown)} of {len(section.slices)})" if len(section.slices) > len(shown) else ""
    title = f"{_ECE.label} per slice, 95% interval{more}; significantly worse: red, better: green"
    ax.set(xlabel=f"{_ECE.label} (%)", title=title)
    ax.set_xlim(left=0)
    return _png(fig)
