"""Hugging Face model card format: a README.md the Hub reads, written with huggingface_hub (the `hf` extra).

`render` writes a whole card; `merge_into` puts a report into an existing one. The metadata's `model-index`
holds an EvalResult per headline metric the report has (clean accuracy, ECE, NLL, Brier; robust accuracy;
the mean corruption accuracy; conformal coverage), each with its data set, split and conventions, and
`metric_args.tool` "macs-audit", by which a later merge finds its own results (no `source_name`: the Hub asks a
URL beside it, and the project names none). The card's text holds one section
between START and END: a summary table, a short calibration paragraph with the reliability diagram as a table,
and the versions. Every string taken from the report is escaped as the Markdown format escapes it.

Merging replaces only that section (or appends it, after a blank line) and only the EvalResults whose
tool is macs-audit: the text outside the section keeps its bytes, every other metadata key and result
its data (huggingface_hub writes the YAML again: key order, quoting and null-valued keys may change). The
Hub's model-index has one model name: a card that has one keeps it, and the report's results go under it.
Each view's results name it as their data set's config ("clean", "noise+blur", "corruptions"), because the
Hub groups results by task, data set, config and split: a result of the card's own in the same group would
be listed among macs-audit's, so such a card is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from macs_audit.errors import InputError, UsageError
from macs_audit.files import read_small_text
from macs_audit.formats import markdown, tables
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import METRICS, VIEW_METRICS, in_place
from macs_audit.numbers import format_value
from macs_audit.report import Report
from macs_audit.text import printable
from macs_audit.version import __version__

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult

START, END = "<!-- macs-audit:start -->", "<!-- macs-audit:end -->"
TOOL = "macs-audit"  # each EvalResult's metric_args["tool"]: what a merge replaces
TASK = "image-classification"
MOST_BYTES = 16 * 2**20  # a model card read whole
# Data sets the report names by a built-in source: (Hub data set id, name).
KNOWN_DATA = {"builtin:cifar10-test": ("uoft-cs/cifar10", "CIFAR-10")}
# The corruption means of the registry, by how many corruptions each averages.
CORRUPTION_MEANS = {"corruption_accuracy": 15, "corruption_accuracy_19": 19}


@dataclasses.dataclass(frozen=True)
class Result:
    """One headline metric as the card states it: the value and interval the report holds, the view it was
    measured on (the data set's config), its conventions, and its label in the summary table."""

    metric: Metric
    value: float
    interval: list[float] | None
    config: str
    conventions: dict[str, Any]
    label: str


def _hub() -> ModuleType:
    try:
        import huggingface_hub
    except ImportError:
        raise UsageError(
            "the model-card format needs huggingface_hub, which is not installed: pip install 'macs-audit[hf]'"
        ) from None
    return huggingface_hub


def model_name(report: Report) -> str:
    """The model's name: its file's stem, else its architecture, else "model"."""
    if report.model.path:
        return printable(Path(report.model.path).stem or report.model.path)
    return printable(report.model.arch or "model")


def _value(value: object) -> float | None:
    """A number the report holds for a metric, else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _interval_conventions(report: Report, interval: list[float] | None, how: str = "bootstrap") -> dict[str, Any]:
    if not interval:
        return {}
    if how == "bootstrap":
        return {"ci_95": list(interval), "bootstrap_resamples": report.conventions.bootstrap_resamples}
    return {"ci_95": list(interval), "interval": how}


def _clean_conventions(report: Report, name: str) -> dict[str, Any]:
    """What the report says of how a clean metric was computed."""
    c = report.conventions
    if name == "ece":
        return {"bins": c.ece_bins, "bin_edges": c.ece_bin_edges, "norm": "L1", "softmax": c.softmax}
    if name in ("nll", "brier"):
        return {"definition": getattr(c, name), "softmax": c.softmax}
    return {}  # accuracy: the top-1 prediction, whatever the probabilities


def results(report: Report) -> list[Result]:
    """The headline metrics the report has, in the card's order: the clean view's, robust accuracy, the
    corruption means, conformal coverage (the registry's rows, read where gate.locate finds them)."""
    from macs_audit.gating import locate

    found = []
    for name in VIEW_METRICS:
        metric = METRICS[name]
        value, interval = locate(report, metric)
        if (number := _value(value)) is not None:
            conventions = {**_clean_conventions(report, name), **_interval_conventions(report, interval)}
            found.append(Result(metric, number, interval, "clean", conventions, tables.clean_label(report, metric)))
    robust, view = METRICS["robust_accuracy"], report.robust_view_name()
    value, interval = locate(report, robust)
    if (number := _value(value)) is not None:
        perturbation = (report.conventions.perturbations or {}).get(view)
        conventions = {"view": view, "perturbation": perturbation, **_interval_conventions(report, interval)}
        found.append(Result(robust, number, interval, view, conventions, f"{robust.label} ({view})"))
    summary = report.corruption_summary
    for name, count in CORRUPTION_MEANS.items():
        metric = METRICS[name]
        if summary is None or (number := _value(locate(report, metric)[0])) is None:
            continue
        conventions = {
            "corruptions": count,
            "severities": summary.severities,
            "corruption_set": summary.corruption_set,
            "source": summary.source,
        }
        found.append(Result(metric, number, None, "corruptions", conventions, metric.label))
    return found + _conformal_results(report)


def _conformal_results(report: Report) -> list[Result]:
    """Each conformal method's coverage on the clean view's held-out part, with the target it was fitted for."""
    from macs_audit.gating import locate

    conformal, found = report.conformal, []
    if conformal is None:
        return []
    for metric in in_place(Place.CONFORMAL):
        part, _, rest = metric.report_key.partition(".")
        method, _, key = rest.partition(".")
        if part != "methods" or key != "coverage" or (number := _value(locate(report, metric)[0])) is None:
            continue
        interval = conformal.methods[method].get("coverage_interval")
        conventions = {
            "method": method,
            "target_coverage": conformal.target_coverage,
            "n_calibration": conformal.n_calibration,
            "n_eval": conformal.n_eval,
            "split": conformal.split,
            **_interval_conventions(report, interval, "Clopper-Pearson"),
        }
        label = f"{metric.label}, target {format_value(conformal.target_coverage, True)}"
        found.append(Result(metric, number, interval, "clean", conventions, label))
    return found


def _dataset(report: Report) -> dict[str, Any]:
    """The EvalResults' data set: its Hub id and name where the report's source is a known one, else the
    source as the report names it; the split; the images scored."""
    d = report.data
    source = printable(d.source or "unknown")
    kind, name = KNOWN_DATA.get(source, (Path(source).name or source, source))
    args = {"source": source, "format": d.format, "n": d.n, "limit": d.limit, "limit_seed": d.limit_seed}
    return {
        "dataset_type": kind,
        "dataset_name": name,
        "dataset_split": d.split,
        "dataset_args": {k: v for k, v in args.items() if v is not None},
    }


def eval_results(report: Report) -> list[Any]:
    """huggingface_hub EvalResults of `results(report)`."""
    hub, dataset = _hub(), _dataset(report)
    return [
        hub.EvalResult(
            task_type=TASK,
            task_name="Image Classification",
            dataset_config=r.config,
            metric_type=r.metric.name,
            metric_value=r.value,
            metric_name=r.metric.title,
            metric_config=f"{r.conventions['bins']} equal-width bins, L1" if r.conventions.get("bins") else None,
            metric_args={"tool": TOOL, **{k: v for k, v in r.conventions.items() if v is not None}},
            **dataset,
        )
        for r in results(report)
    ]


def _interval_text(r: Result) -> str:
    if not r.interval:
        return ""
    percent = r.metric.percent
    return f"[{format_value(r.interval[0], percent)}, {format_value(r.interval[1], percent)}]"


def _reliability_lines(report: Report) -> list[str]:
    bins = report.clean.reliability
    if bins is None:
        return []
    rows = [
        [
            f"{bins.edges[i]:.2f}-{bins.edges[i + 1]:.2f}",
            f"{bins.count[i]:,}",
            format_value(bins.mean_confidence[i], True),
            format_value(bins.accuracy[i], True),
        ]
        for i in range(len(bins.count))
    ]
    caption = f"Reliability diagram of the clean view ({len(bins.count)} equal-width confidence bins):"
    return [caption, "", *markdown.table(["confidence", "images", "mean confidence", "accuracy"], rows), ""]


def _calibration_lines(report: Report) -> list[str]:
    ece = METRICS["ece"]
    value = report.clean.metrics.get("ece")
    text = f"{ece.table_label} on the clean view: {format_value(value, ece.percent)}."
    ts, caption = report.temperature_scaling, tables.temperature_caption(report)
    if ts is not None and caption is not None and "ece" in ts.raw and "ece" in ts.scaled:
        text += (
            f" Temperature scaling ({caption}): ECE {format_value(ts.raw['ece'], ece.percent)} before, "
            f"{format_value(ts.scaled['ece'], ece.percent)} after."
        )
    return ["### Calibration", "", markdown.esc(text), "", *_reliability_lines(report)]


def section(report: Report, gate: GateResult | None = None) -> str:
    """The card's macs-audit section, markers included, lines joined by newlines."""
    d = report.data
    _, name = KNOWN_DATA.get(str(d.source), (None, d.source or "unknown data"))
    limit = f" (--limit {d.limit}, seed {d.limit_seed})" if d.limit is not None else ""
    images = f"{d.n:,}" if d.n is not None else "?"
    split = f", {d.split} split" if d.split else ""
    data = f"Data: {name} ({d.source}){split}, {images} images{limit}."
    found = results(report)
    rows = [[r.label, format_value(r.value, r.metric.percent), _interval_text(r)] for r in found]
    lines = [START, "## Calibration and robustness (macs-audit)", "", markdown.esc(data), ""]
    lines += [*markdown.table(["metric", "value", "95% interval"], rows), ""]
    if gate is not None:
        lines += [f"Gate: {markdown.esc(tables.gate_verdict(gate))}.", ""]
    lines += _calibration_lines(report)
    made = f", made by macs-audit {report.tool.version}" if report.tool.version else ""
    versions = f"Written by macs-audit {__version__} from a report of schema {report.schema_version}{made}."
    lines.append(markdown.esc(versions))
    return "\n".join([*lines, END])


def _parsed(text: str, source: str) -> Any:
    """`text` as a huggingface_hub ModelCard; InputError naming `source` where its metadata is not a YAML mapping
    or not a model card's (a model-index huggingface_hub cannot read)."""
    import yaml
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    hub, match = _hub(), REGEX_YAML_BLOCK.search(text)
    newline = "\r\n" if "\r\n" in text else "\n"
    if match is None:  # an empty block: huggingface_hub would log a warning for none
        return hub.ModelCard(f"---{newline}{newline}---{newline}{text}")
    block = "the block between the --- lines"
    try:
        metadata = yaml.safe_load(match.group(2))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {match.group(1).count(newline) + mark.line + 1}" if mark is not None else ""
        problem = printable(getattr(exc, "problem", None) or type(exc).__name__)
        raise InputError(f"{source}: its metadata ({block}) is not valid YAML ({problem}{where}); fix it") from None
    if metadata is not None and not isinstance(metadata, dict):
        raise InputError(f"{source}: its metadata ({block}) is not a mapping of keys to values; fix it")
    try:
        return hub.ModelCard(text)
    except (ValueError, TypeError) as exc:
        first = printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise InputError(f"{source}: its metadata is not a model card's ({first}); fix it") from None


def _replaced(text: str, new: str, source: str) -> str:
    """`text` with its section replaced by `new`, or `new` appended after a blank line; nothing else changed."""
    starts, ends = text.count(START), text.count(END)
    if (starts, ends) == (0, 0):
        newline = "\r\n" if "\r\n" in text else "\n"
        gap = "" if not text else newline if text.endswith("\n") else newline * 2
        return f"{text}{gap}{new}{newline}"
    start, end = text.find(START), text.find(END)
    if (starts, ends) != (1, 1) or end < start:
        raise InputError(f"{source}: its {START} and {END} markers are not one pair in order; keep one of each")
    return text[:start] + new + text[end + len(END) :]


def _ours(result: Any) -> bool:
    return isinstance(result.metric_args, dict) and result.metric_args.get("tool") == TOOL


def _merged(card: Any, report: Report, gate: GateResult | None, source: str) -> str:
    ours = eval_results(report)
    theirs = [r for r in card.data.eval_results or [] if not _ours(r)]
    clash = {r.unique_identifier for r in theirs} & {r.unique_identifier for r in ours}
    if clash:
        _, kind, config, split, _ = sorted(clash, key=str)[0]
        raise InputError(
            f"{source}: its model-index has results of its own on {printable(kind)} (config {config}, split "
            f"{split}), which the Hub would list among macs-audit's; give them another dataset config"
        )
    card.data.eval_results = theirs + ours
    card.data.model_name = card.data.model_name or model_name(report)
    new = section(report, gate)
    if "\r\n" in card.text:
        new = new.replace("\n", "\r\n")
    card.text = _replaced(card.text, new, source)
    return str(card)


def render(report: Report, gate: GateResult | None = None) -> str:
    """A whole model card: metadata (pipeline tag, tags, model-index) and a title over the section."""
    hub = _hub()
    data = hub.ModelCardData(pipeline_tag=TASK, tags=["macs-audit", "calibration"])
    card = hub.ModelCard(f"---\n{data.to_yaml()}\n---\n\n# {markdown.esc(model_name(report))}\n")
    return _merged(card, report, gate, "the new card")


def merge_into(existing: str, report: Report, gate: GateResult | None = None, source: str = "the model card") -> str:
    """`existing` (a model card's text) with the report's section and EvalResults put in (module docstring).
    InputError naming `source` where its metadata is not valid YAML, not a mapping or not a model card's."""
    return _merged(_parsed(existing, source), report, gate, source)


def merge_file(path: Path, report: Report, gate: GateResult | None = None) -> str:
    """The card at `path` with the report merged in (merge_into); InputError where it cannot be read."""
    text = read_small_text(path, MOST_BYTES, what="model card", holds="a model card")
    return merge_into(text, report, gate, str(path))


def render_comparison(comparison: Comparison) -> str:
    raise UsageError(
        "a model card describes one model: write it from one report (macs-audit report B.json --format model-card)"
    )
