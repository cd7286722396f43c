"""HTML format: one self-contained file (inline CSS, PNG plots as data: URIs, no script, no network).

Every string that comes from the report is passed through `esc` (html.escape, after macs_audit.text's
`printable` writes unprintable characters as escapes), numbers included, so a class name such as
`<script>` is shown, never run. A Content-Security-Policy meta tag forbids
scripts and any fetch, as a second line of defence.
"""

from __future__ import annotations

import base64
import html as _html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from macs_audit.formats import layout, plots, tables
from macs_audit.metrics.metric_row import Metric
from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_value
from macs_audit.report import Report
from macs_audit.text import printable

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d232a;
       background: #f6f7f9; }
main { max-width: 1080px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6rem; margin: 0 0 4px; } h2 { font-size: 1.2rem; margin: 32px 0 10px;
     border-bottom: 1px solid #d8dce2; padding-bottom: 4px; }
.sub { color: #5b6570; margin: 0 0 16px; overflow-wrap: anywhere; }
.banner { padding: 12px 16px; border-radius: 6px; font-weight: 600; margin: 12px 0; }
.pass { background: #e3f4e8; color: #17602f; border: 1px solid #9fd6af; }
.fail { background: #fbe6e6; color: #8f1d1d; border: 1px solid #e8a3a3; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { background: #fff; border: 1px solid #d8dce2; border-radius: 6px; padding: 10px 14px; min-width: 130px; }
.card .k { font-size: .8rem; color: #5b6570; } .card .v { font-size: 1.35rem; font-weight: 600; }
table { border-collapse: collapse; background: #fff; margin: 8px 0; font-size: .9rem; }
th, td { border: 1px solid #d8dce2; padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: #eef0f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.failed td { background: #fbe6e6; } tr.failed td:first-child { color: #8f1d1d; font-weight: 700; }
tr.passed td:first-child { color: #17602f; font-weight: 700; } tr.worse td { background: #fbe6e6; } tr.better td.status { color: #17602f; }
.row { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.row > figure { flex: 1 1 360px; min-width: 0; max-width: 620px; }  /* beside its table: the plot shrinks */
figure { margin: 8px 0; background: #fff; border: 1px solid #d8dce2; border-radius: 6px; padding: 6px; }
figure img { display: block; max-width: 100%; height: auto; }
figcaption { font-size: .8rem; color: #5b6570; padding: 4px 2px 0; }
.note { font-size: .85rem; color: #5b6570; } code { overflow-wrap: anywhere; }
footer { margin-top: 40px; font-size: .8rem; color: #5b6570; }
nav.toc { background: #fff; border: 1px solid #d8dce2; border-radius: 6px; padding: 8px 14px; margin: 12px 0; }
nav.toc ol { margin: 4px 0; padding-left: 20px; columns: 2; } nav.toc a { color: #24508f; }
ul.summary { margin: 8px 0; padding-left: 20px; } ul.summary .bad { color: #8f1d1d; font-weight: 700; }
p.explain { max-width: 860px; }
"""  # noqa: E501


def esc(value: object) -> str:
    return _html.escape(printable(value), quote=True)


def _image(png: bytes | None, alt: str, caption: str = "") -> str:
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}">{cap}</figure>'


def _table(
    header: Sequence[str], rows, numeric: tuple[int, ...] | None = None, row_classes: list[str] | None = None
) -> str:
    """numeric: indices of right-aligned number columns (default: all but the first)."""
    numeric = tuple(range(1, len(header))) if numeric is None else numeric
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{esc(row_classes[i])}"' if row_classes and row_classes[i] else ""
        cells = "".join(
            f'<td class="num">{esc(c)}</td>' if j in numeric else f"<td>{esc(c)}</td>" for j, c in enumerate(row)
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
            "<body><main>",
            *body,
            "</main></body>",
            "</html>",
            "",
        ]
    )


def _cards(report: Report) -> str:
    """The headline numbers: clean accuracy, ECE and NLL, ECE after scaling, robust and corruption accuracy."""
    items: list[tuple[str, float | None, Metric]] = [
        (METRICS[name].short_label, report.clean.metrics.get(name), METRICS[name])
        for name in ("accuracy", "ece", "nll")
    ]
    ece, robust, corruption = METRICS["ece"], METRICS["robust_accuracy"], METRICS["corruption_accuracy"]
    if report.temperature_scaling:
        items.append((f"{ece.short_label} after T-scaling", report.temperature_scaling.scaled.get("ece"), ece))
    if report.robustness:
        items.append((robust.short_label, report.robustness.robust_accuracy, robust))
    if report.corruption_summary:
        items.append((corruption.short_label, report.corruption_summary.mean_accuracy_15, corruption))
    cards = "".join(
        f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(format_value(v, m.percent))}</div></div>'
        for k, v, m in items
        if v is not None
    )
    return f'<div class="cards">{cards}</div>'


def _gate_section(gate: GateResult) -> list[str]:
    basis = (
        "the pessimistic end of the 95% bootstrap interval where one exists" if gate.use_interval else "point estimates"
    )
    header = ["result", "check", "metric", "observed", "threshold", "detail"]
    rows = tables.gate_rows(gate)
    if any(c.baseline is not None for c in gate.checks):  # the baseline's value beside the candidate's
        header.insert(3, "baseline")
        for row, check in zip(rows, gate.checks, strict=True):
            row.insert(3, format_value(check.baseline, check.percent) if check.baseline is not None else "")
    rows = sorted(rows, key=lambda r: r[0] != "FAIL")  # the failed checks first
    classes = ["failed" if r[0] == "FAIL" else "passed" for r in rows]
    skipped = [f'<p class="note">Skipped: {esc(reason)}</p>' for reason in gate.skipped]
    source = f"Config: {gate.config or '-'}" + (f"; baseline: {gate.baseline}" if gate.baseline else "")
    return [
        '<h2 id="gate">Gate</h2>',
        f'<p class="note">Values compared: {esc(basis)}. {esc(source)}</p>',
        _table(header, rows, numeric=tuple(range(3, len(header) - 1)), row_classes=classes),
        *skipped,
    ]


# One plain paragraph per section: what it measures, what a bad value means, and the command that fixes it.
EXPLAIN = {
    "clean": "How far the model's confidence is from its accuracy on the clean test images. ECE is the average "
    "gap over confidence bins: 3% means a prediction made with 90% confidence is right about 87% or 93% of "
    "the time. Miscalibration is fixed without retraining by temperature scaling: "
    "macs-audit calibrate MODEL --data HELD_OUT.npz --out calibrated.",
    "per_class": "The clean test images of each class on their own: a class far below the overall accuracy, or "
    "with a large ECE, is where the model's confidence misleads most. More training images of that class, or "
    "fine-tuning (macs-audit finetune), target it; temperature scaling changes the confidence, not the ranking.",
    "slices": "The images cut by a metadata column or a property of the images (brightness, sharpness, ...), each "
    "slice scored against the rest of the data: where the model is less accurate, or more overconfident, than on "
    "the whole. A slice is significant when its accuracy or overconfidence gap survives the correction for every "
    "test made. A slice's ECE is larger by noise alone the fewer images it holds, so the ECE is shown, not tested. "
    "Slices below the minimum size are listed, not scored; evaluate --metadata FILE adds columns to slice by.",
    "temperature": "One number T fitted on held-out images divides the logits: T above 1 means the model was "
    "overconfident, below 1 underconfident. The scaled column is what the calibrated model would score; "
    "macs-audit calibrate MODEL --data HELD_OUT.npz --out calibrated writes that model.",
    "calibrators": "Richer post-hoc maps than one temperature, fitted on the same held-out images and scored on the "
    "rest. A map with many parameters wins only when it beats temperature scaling beyond the noise: "
    "macs-audit calibrate MODEL --data HELD_OUT.npz --method all --out calibrated chooses one.",
    "margins": "The logit margin is the true class's logit less the largest other one: small or negative margins "
    "are predictions a small change of the image flips. Fine-tuning with the MaCS objective widens them: "
    "macs-audit finetune MODEL.safetensors --arch ARCH --data TRAIN.npz --out finetuned.",
    "robustness": "The same images under noise and blur. A large drop from clean accuracy, or an ECE that grows "
    "under the perturbation, means the confidence cannot be trusted off the test distribution; "
    "macs-audit finetune MODEL.safetensors --arch ARCH --data TRAIN.npz --out finetuned (MaCS) trains for it.",
    "corruptions": "The 19 common corruptions at 5 severities: accuracy on the left, ECE on the right. Rows that "
    "turn dark on the left and red on the right are where the model is both wrong and sure of itself; "
    "fine-tuning with MaCS (macs-audit finetune) and temperature scaling (macs-audit calibrate) both help.",
    "shift": "Natural-shift sets scored with the model's own classes mapped to theirs: how accuracy and "
    "calibration hold on images collected elsewhere.",
    "real": "ImageNet's validation set scored against the ReaL relabelling, which corrects the original labels.",
    "selective": "What abstaining buys: the error rate of the predictions kept when the least confident are "
    "dropped. A curve close to the oracle's means the confidence ranks right and wrong predictions well.",
    "conformal": "Prediction sets that hold the true class with the target probability (90% by default). Coverage "
    "should meet the target; smaller sets are more useful. The worst class's coverage shows which class the "
    "guarantee leaves behind. evaluate --coverage sets the target.",
    "ood": "How well the confidence tells the test images from a second, unrelated data set (evaluate --ood-data); "
    "with the model's features, the feature-space detectors too, which see what the logits hide.",
    "representation": "Whether the data a view or set brings is what the model was validated on, without labels: "
    "its penultimate features tested against the clean images' (MMD, a permutation p-value). A large MMD on "
    "--unlabeled or --shift-data is a distribution the audit's numbers may not carry over to.",
    "unlabeled": "Accuracy estimated on images without labels (evaluate --unlabeled), fitted on the labelled data.",
    "parity": "A deployed build (export, FP16, INT8) against its reference on the same images: agreement, flips and "
    "the change in calibration, with paired intervals.",
}


def _summary(report: Report, gate: GateResult | None) -> list[str]:
    """The verdict banner (the gate's where one ran, else the audit's own) and the summary's findings and fixes."""
    from macs_audit.formats.summary import summarize

    found = summarize(report)
    if gate is not None:
        banner = (
            f'<div class="banner {"pass" if gate.passed else "fail"}" id="verdict">{esc(tables.gate_verdict(gate))}'
        )
    else:
        banner = f'<div class="banner {"fail" if found.problems else "pass"}" id="verdict">{esc(found.verdict)}'
    items = [
        f'<li>{esc(f.label)}: <span class="{"bad" if f.bad else "ok"}">{esc(f.value)}</span></li>'
        for f in found.findings
    ]
    items += [f"<li>Fix: {esc(fix.what)}: <code>{esc(fix.command)}</code></li>" for fix in found.fixes]
    items += [f'<li class="bad">Note: {esc(note)}</li>' for note in found.notes]
    return [banner + "</div>", f'<ul class="summary">{"".join(items)}</ul>']


def _contents(entries: list[tuple[str, str]]) -> str:
    links = "".join(f'<li><a href="#{esc(key)}">{esc(title)}</a></li>' for key, title in entries)
    return f'<nav class="toc" aria-label="contents"><strong>Contents</strong><ol>{links}</ol></nav>'


def _conventions(report: Report) -> list[tuple[str, str]]:
    """The conventions as rows a person reads: a nested value as one row per key (`bootstrap: method`)."""

    def rows(prefix: str, value: object) -> list[tuple[str, str]]:
        if isinstance(value, dict) and value:
            return [row for key, sub in value.items() for row in rows(f"{prefix}: {key}" if prefix else str(key), sub)]
        if isinstance(value, list):
            return [(prefix, ", ".join(str(v) for v in value))]
        return [(prefix, str(value))]

    return [row for key, value in report.conventions.to_dict().items() for row in rows(str(key), value)]


def _reliability(report: Report) -> str:
    return _image(
        plots.reliability(report.clean, "clean"),
        "reliability diagram and confidence histogram",
        "Bars: accuracy per confidence bin; hatched: gap to the diagonal. Below: share of samples per bin.",
    )


def _margins(report: Report) -> str:
    png = plots.margin_histogram(report)
    return _image(png, "logit margin histogram", "Margin z[y] - max other logit; red bars are misclassified.")


def _robust_reliability(report: Report) -> str:
    """Calibration under shift: the reliability diagram on the robust view."""
    robust = report.robust_view()
    if robust is None:
        return ""
    return _image(
        plots.reliability(robust),
        f"reliability diagram on the {robust.name} view",
        f"Reliability on the {robust.name} view.",
    )


def _temperature(report: Report) -> str:
    """Reliability before and after temperature scaling, on the scored part of the calibration split."""
    from macs_audit.report import ViewResult

    ts = report.temperature_scaling
    if ts is None or ts.raw_reliability is None or ts.scaled_reliability is None:
        return ""
    before = ViewResult("before", "clean", {"ece": ts.raw.get("ece", float("nan"))}, {}, ts.raw_reliability)
    after = ViewResult("after", "clean", {"ece": ts.scaled.get("ece", float("nan"))}, {}, ts.scaled_reliability)
    return _image(
        plots.reliability(before, "before T", after, f"after T = {ts.temperature:.3f}"),
        "reliability diagram before and after temperature scaling",
        f"The same {tables.shown(ts.n_eval, 0):,} held-out images before and after dividing the logits by T.",
    )


def _heatmap(report: Report) -> str:
    return _image(
        plots.corruption_heatmap(report),
        "accuracy and ECE heat maps by corruption and severity",
        "Left: accuracy (%), each cell one corruption at one severity. Right: ECE (%) of the same cells: "
        "how far the confidence is from the accuracy there.",
    )


def _risk_coverage(report: Report) -> str:
    return _image(
        plots.risk_coverage(report.clean),
        "risk-coverage curve",
        "Error rate of the predictions kept when the model abstains on the least confident; dashed: "
        "the best possible ranking at this accuracy.",
    )


def _ood_histograms(report: Report) -> str:
    return _image(
        plots.ood_histograms(report),
        "OOD score histograms",
        "Each score over the evaluation images (in, blue) and the OOD set (out, red); higher means in-distribution.",
    )


def _slice_ece(report: Report) -> str:
    return _image(
        plots.slice_ece(report),
        "ECE per slice with its 95% interval",
        "Each slice's ECE with its 95% bootstrap interval, in the table's order; red: the slices whose accuracy "
        "or overconfidence differs from the rest's after the correction. Dashed: the ECE of every image.",
    )


# The plots, by section key: under the section's tables, or above them (ABOVE); in ROW, the tables and the
# plot stand side by side (the trust sections keep that layout with or without a plot).
FIGURES: dict[str, Callable[[Report], str]] = {
    "clean": _reliability,
    "temperature": _temperature,
    "margins": _margins,
    "robustness": _robust_reliability,
    "corruptions": _heatmap,
    "selective": _risk_coverage,
    "ood": _ood_histograms,
    "slices": _slice_ece,
}
ABOVE = {"corruptions"}
ROW = {"clean", "temperature", "selective", "conformal", "ood", "unlabeled"}


def _section(report: Report, section: layout.Part, content: layout.Content) -> list[str]:
    """A heading, the caption, the tables (each with its note) and the section's plot; nothing with neither."""
    figure = FIGURES[section.key](report) if section.key in FIGURES else ""
    if not content.tables and not figure:
        return []
    body = [f'<h2 id="{esc(section.key)}">{esc(section.heading(content))}</h2>']
    if section.key in EXPLAIN:
        body.append(f'<p class="explain">{esc(EXPLAIN[section.key])}</p>')
    if content.caption:
        body.append(f'<p class="note">{esc(content.caption)}</p>')
    parts = []
    for t in content.tables:
        parts.append(_table(t.header, t.rows, numeric=tuple(range(t.text_columns, len(t.header)))))
        if t.note:
            parts.append(f'<p class="note">{esc(t.note)}</p>')
    if section.key in ROW:
        return body + [
            '<div class="row"><div>',
            *parts,
            "</div>",
            *([figure] if section.key in FIGURES else []),
            "</div>",
        ]
    if section.key in ABOVE:
        return body + ([figure] if figure else []) + parts
    return body + parts + ([figure] if figure else [])


def render(report: Report, gate: GateResult | None = None) -> str:
    """The verdict and summary, a table of contents, the gate (failed checks first), each section with its
    paragraph, the model and runtime, the conventions."""
    body = ["<h1>macs-audit calibration report</h1>", f'<p class="sub">{esc(tables.title(report))}</p>']
    body += _summary(report, gate)
    body.append(_cards(report))
    contents: list[tuple[str, str]] = [("gate", "Gate")] if gate is not None else []
    shown: list[str] = []
    for section, content in layout.present(report):
        part = _section(report, section, content)
        if part:
            contents.append((section.key, section.title))
            shown += part
    contents += [("model", "Model, data and runtime"), ("conventions", "Conventions")]
    body.append(_contents(contents))
    if gate is not None:
        body += _gate_section(gate)
    body += shown

    body += [
        '<h2 id="model">Model, data and runtime</h2>',
        _table(["field", "value"], tables.header_rows(report), numeric=()),
    ]
    classes = report.data.class_names or []
    if classes:
        body.append(f'<p class="note">Classes: {esc(", ".join(str(c) for c in classes))}</p>')
    runtime = [*report.runtime.to_dict().items(), *((f"seed {k}", v) for k, v in report.seeds.items())]
    body.append(_table(["runtime", "value"], runtime, numeric=()))
    body += [
        '<h2 id="conventions">Conventions</h2>',
        _table(["convention", "value"], _conventions(report), numeric=()),
    ]
    body.append(
        f"<footer>Generated by macs-audit {esc(tables.shown(report.tool.version))}; "
        f"report schema {esc(report.schema_version)}. Values are fractions shown as percent where marked.</footer>"
    )
    return _page(f"macs-audit: {tables.title(report)}", body)


def render_comparison(comparison: Comparison) -> str:
    from macs_audit.compare import RULE

    body = [
        "<h1>macs-audit comparison</h1>",
        f'<p class="sub">A ({esc(comparison.a_name)}): {esc(tables.title(comparison.a))}<br>'
        f"B ({esc(comparison.b_name)}): {esc(tables.title(comparison.b))}</p>",
        f'<div class="banner {"fail" if comparison.worse else "pass"}">{esc(comparison.headline)}</div>',
    ]
    body += [f'<p class="note">Note: {esc(note)}</p>' for note in comparison.notes]
    rows = tables.comparison_rows(comparison)
    body += [
        "<h2>Metrics</h2>",
        _table(
            ["section", "metric", "A", "B", "B - A", "status"],
            rows,
            numeric=(2, 3, 4),
            row_classes=[r[5] for r in rows],
        ),
        f'<p class="note">pp: percentage points. {esc(RULE)}; '
        "<code>macs-audit gate --baseline</code> applies thresholds to them.</p>",
    ]
    png = plots.reliability(
        comparison.a.clean, f"A: {comparison.a_name}", comparison.b.clean, f"B: {comparison.b_name}"
    )
    body += ["<h2>Reliability (clean)</h2>", _image(png, "reliability diagrams of A and B")]
    return _page("macs-audit comparison", body)
