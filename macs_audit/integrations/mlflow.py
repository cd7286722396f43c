"""A run logged to MLflow (the `mlflow` extra) once its own outputs are written: `evaluate`, `calibrate` and
`finetune` with --mlflow, and `log_report` for a script's own audit (the API's audit() takes no mlflow option:
a logging failure would lose the report it returns). docs/mlflow.md says what is logged and how to read it.

Where: into the active run where there is one (`mlflow.active_run()` in this process, else the run
$MLFLOW_RUN_ID names), which is left running; else a new run in the experiment --mlflow-experiment names (default:
the model's name; created if missing), named by --mlflow-run-name (default: "<model> <command>"), ended here. The
store is --mlflow-tracking-uri, else $MLFLOW_TRACKING_URI, else MLflow's default.

Metric names, one rule (`metric_names`): `[<report>/]<place>/<metric>` where
- `<place>/<metric>`: every registry metric (metrics/registry.py) the report holds, under its place's name
  (metric_row.Place; the clean view's metrics, selective prediction's included, under `clean`): clean/ece,
  temperature/temperature, robustness/robust_accuracy, corruption/corruption_accuracy, ood/ood_auroc, ...;
- `view/<view>/<metric>`: each perturbation and corruption view's key metrics (registry.VIEW_METRICS: accuracy,
  ECE, NLL, Brier): view/noise_blur/ece, view/fog_3/accuracy;
- `corruption/<corruption>/<metric>`: each corruption's means over its severities, the same key metrics;
- `<report>/` before each of these for the other audits of a before/after command: before/clean/ece, and
  finetune's temperature_only/clean/ece (the audit of the written model has none);
- finetune's training curve: `train/<term>` at each optimizer step (the loss, its terms, the learning rate) and
  `val/<metric>` of each epoch's validation at the epoch's last step.
A view's or corruption's name keeps ASCII letters, digits, `_ - .` and spaces, every other character becoming `_`
(noise+blur -> noise_blur, fog@3 -> fog_3): MLflow refuses the rest, and `/` separates the parts. Values that are
absent or not finite are not logged.

Parameters: `<command>.<option>` of each resolved option with a value (evaluate.bootstrap = "1000"; lists as
JSON, switches true/false), but the tracking URI, which may hold credentials. Tags: `macs_audit.command`,
`.version`, `.schema_version`, `.model`, `.verdict` (the summary's verdict line), `.gate` (passed or failed) and
`.gate_failed_checks` where a gate ran, `.which_fix` for a before/after command. Artifacts: the files the run
wrote (reports, saved predictions, the before/after audits and table), `report.json` (the JSON report of the
audited model, always), `gate.json` where a gate ran, and the clean view's reliability diagram as a PNG
(`plots/reliability_clean.png`; calibrate's and finetune's draw the model before beside the model written).

Nothing here prints: MLflow's log lines and warnings are held back while it logs. Unless set, MLflow's HTTP
retries are cut to 2 (backoff 1 s, 10 s timeout) for the logging, so an unreachable server fails in seconds,
not MLflow's minutes. Any failure of the store is an IntegrationError (exit 4), raised after the run's outputs
were written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import socket
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from macs_audit.errors import IntegrationError, MacsAuditError, UsageError
from macs_audit.gating.checks import locate
from macs_audit.metrics.metric_row import Metric, Place
from macs_audit.metrics.registry import METRICS, VIEW_METRICS
from macs_audit.progress import ProgressFn, Stage
from macs_audit.text import without_credentials

if TYPE_CHECKING:
    from macs_audit.gating import GateResult
    from macs_audit.report import Report
    from macs_audit.settings.resolve import Resolved

EXTRA = "pip install 'macs-audit[mlflow]'"
# MLflow's limits: a parameter's value (6000 characters), a tag's (8000); per log_batch call, 1000 metrics, 100
# parameters and 100 tags, 1000 in all.
MAX_PARAM, MAX_TAG = 6000, 8000
MAX_METRICS, MAX_PARAMS_OR_TAGS, MAX_ENTITIES = 1000, 100, 1000
NOT_PARAMS = ("mlflow_tracking_uri",)  # where the run is logged, which may carry credentials
# MLflow's HTTP settings while it logs, where the environment sets none: its defaults retry for minutes.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
RELIABILITY_PLOT = "plots/reliability_clean.png"
TRAINING_UNIT = "steps"  # what finetune's epoch stages count (finetune/loop.py): their terms are one step's
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. ]")


def require_mlflow() -> ModuleType:
    """The mlflow package, or a UsageError naming the extra that installs it."""
    try:
        import mlflow
    except ImportError:
        raise UsageError(
            f"logging to MLflow (--mlflow) needs the mlflow package, which is not installed: {EXTRA}"
        ) from None
    return mlflow


@dataclasses.dataclass(frozen=True)
class Tracking:
    """Where a run is logged: the tracking URI, experiment and run name as the options give them (None: the
    default, see the module's docstring)."""

    tracking_uri: str | None = None
    experiment: str | None = None
    run_name: str | None = None

    @classmethod
    def of(cls, resolved: Resolved) -> Tracking | None:
        """The tracking a command's resolved options ask for; None without --mlflow. The package is imported now,
        before the run: a missing extra is a UsageError in a second, not after the audit."""
        if not resolved["mlflow"]:
            return None
        require_mlflow()
        return cls(resolved["mlflow_tracking_uri"], resolved["mlflow_experiment"], resolved["mlflow_run_name"])


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a command logs. `report`: its audit (calibrate's and finetune's: of the model written); `compared`:
    its other audits by prefix (before, temperature_only); `options`: the resolved options (name -> value);
    `name`: the model's (default: the report's model file's stem); `files`: what the run wrote, logged as they are;
    `documents`: more artifacts, made here (name -> text or bytes); `curve`: the training curve, (optimizer step,
    name -> value) pairs; `tags`: more tags."""

    command: str
    options: Mapping[str, Any] | None  # None: the report's record of its settings (evaluate's)
    report: Report | None = None
    compared: Mapping[str, Report] = dataclasses.field(default_factory=dict)
    gate: GateResult | None = None
    name: str = ""
    files: Sequence[Path] = ()
    documents: Mapping[str, str | bytes] = dataclasses.field(default_factory=dict)
    curve: Sequence[tuple[int, Mapping[str, float]]] = ()
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def model_name(self) -> str:
        if self.name or self.report is None:
            return self.name or "model"
        from macs_audit.formats.model_card import model_name

        return model_name(self.report)


@dataclasses.dataclass(frozen=True)
class Logged:
    """Where a run was logged: its run and experiment ids, the tracking URI (credentials left out), and whether it
    was the active run (left running) or a new one (ended)."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    active: bool

    def describe(self) -> str:
        which = "the active run" if self.active else "run"
        return f"logged to MLflow: {which} {self.run_id} (experiment {self.experiment_id}) at {self.tracking_uri}"


def log_report(
    report: Report,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    run_name: str | None = None,
    gate: GateResult | None = None,
    options: Mapping[str, Any] | None = None,
    files: Sequence[str | os.PathLike[str]] = (),
) -> Logged:
    """Log a report the Python API returned (macs_audit.audit, audit_predictions, load_report) as `evaluate
    --mlflow` logs its own: into the active run where there is one (a training script's), else a new run.
    `gate`: macs_audit.gate's result, as tags and gate.json; `options`: parameters (default: the report's recorded
    settings); `files`: more artifacts. What was logged; IntegrationError where the store fails, UsageError where
    mlflow is not installed."""
    require_mlflow()
    settings = report.settings
    command = settings.command if settings is not None and settings.command else "evaluate"
    record = RunRecord(command, options, report, gate=gate, files=[Path(file) for file in files])
    return log_run(Tracking(tracking_uri, experiment, run_name), record)


def before_after_record(
    command: str,
    options: Mapping[str, Any],
    run: Any,
    files: Sequence[Path],
    which: str | None,
    compared: Mapping[str, Report],
) -> RunRecord:
    """What `calibrate` and `finetune` log: the audit of the model written (`run.after`) and the `compared` audits
    under their names (before, temperature_only), the `files` of the before/after audit and the run's record in OUT
    (those written), the comparison's JSON (before_after.json), and which fix won. The experiment and run are named
    after the model given (`run.before`'s), as evaluate's of it are."""
    from macs_audit.formats.model_card import model_name

    return RunRecord(
        command,
        options,
        run.after,
        compared=compared,
        name=model_name(run.before),
        files=[path for path in files if path.is_file()],
        documents={"before_after.json": json.dumps(run.comparison.to_dict(), indent=2) + "\n"},
        tags={"macs_audit.which_fix": which} if which else {},
    )


def safe_name(name: str) -> str:
    """A view's or corruption's name as one part of a metric name (the module's rule): noise+blur -> noise_blur."""
    part = _UNSAFE.sub("_", name)
    return part if part.strip(".") else part.replace(".", "_") or "_"  # "." or ".." would be read as a path


def _place(metric: Metric) -> str:
    # The clean view holds selective prediction's metrics too (Place.SELECTIVE): both are the clean view's.
    return Place.CLEAN.value if metric.place in (Place.CLEAN, Place.SELECTIVE) else metric.place.value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def metric_names(report: Report, prefix: str = "") -> dict[str, float]:
    """MLflow metric name -> value of every metric of `report` the module's rule names, each under `prefix`
    ("before/"); the values are the report's, as they are."""
    found: dict[str, Any] = {}
    for metric in METRICS.values():
        found[f"{_place(metric)}/{metric.name}"] = locate(report, metric)[0]
    for view in report.views:
        for key in VIEW_METRICS:
            found[f"view/{safe_name(view.name)}/{key}"] = view.metrics.get(key)
    summary = report.corruption_summary
    for name, means in (summary.corruptions if summary is not None else {}).items():
        for key in VIEW_METRICS:
            found[f"corruption/{safe_name(name)}/{key}"] = getattr(means, key, None)
    return {prefix + name: number for name, value in found.items() if (number := _number(value)) is not None}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps([item if isinstance(item, (bool, int, float)) else str(item) for item in value])
    return str(value)


def recorded_options(report: Report | None) -> dict[str, Any]:
    """name -> value of the options a report's settings record (evaluate's: those that applied to its audit)."""
    settings = report.settings if report is not None else None
    recorded = settings.options if settings is not None else {}
    return {name: entry.get("value") for name, entry in recorded.items() if isinstance(entry, dict)}


def param_values(command: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The parameters of a command's resolved options: `<command>.<option>` -> its value as text (the module's
    rule); an option without a value is left out, and the tracking URI."""
    return {
        f"{command}.{name}": _cut(_param_text(value), MAX_PARAM)
        for name, value in options.items()
        if value is not None and name not in NOT_PARAMS
    }


def run_tags(record: RunRecord) -> dict[str, str]:
    """The run's tags: the command, the tool's version, the report's schema, model and verdict, the gate's outcome."""
    from macs_audit.version import __version__

    tags = {"macs_audit.command": record.command, "macs_audit.version": __version__}
    if record.report is not None:
        from macs_audit.formats.summary import summarize

        tags["macs_audit.schema_version"] = record.report.schema_version
        tags["macs_audit.model"] = record.report.model.path or record.model_name
        tags["macs_audit.verdict"] = summarize(record.report).verdict
    if record.gate is not None:
        tags["macs_audit.gate"] = "passed" if record.gate.passed else "failed"
        if record.gate.failures:
            tags["macs_audit.gate_failed_checks"] = ",".join(check.name for check in record.gate.failures)
    tags.update(record.tags)
    return {key: _cut(str(value), MAX_TAG) for key, value in tags.items()}


def documents_of(record: RunRecord) -> dict[str, str | bytes]:
    """The artifacts made here: the JSON report (report.json), the gate's result, the clean view's reliability
    diagram (of the model written beside the one before, for calibrate and finetune), and the record's own."""
    documents: dict[str, str | bytes] = {}
    if record.report is not None:  # always there, whatever the run wrote: the audit of its model
        documents["report.json"] = record.report.to_json()
    if record.gate is not None:
        documents["gate.json"] = json.dumps(record.gate.to_dict(), indent=2) + "\n"
    if record.report is not None:
        from macs_audit.formats import plots

        # One figure (each costs a few tenths of a second): the other views' are in the HTML report.
        other = next(iter(record.compared.items()), None)
        if other is None:
            png = plots.reliability(record.report.clean)
        else:
            png = plots.reliability(record.report.clean, "after", other[1].clean, other[0])
        if png is not None:
            documents[RELIABILITY_PLOT] = png
    documents.update(record.documents)
    return documents


def log_run(tracking: Tracking, record: RunRecord) -> Logged:
    """Log `record` to MLflow (the module's docstring says where and how); what was logged. IntegrationError (one
    line) where the store cannot be reached or refuses it; UsageError where mlflow is not installed."""
    mlflow = require_mlflow()
    uri = mlflow.get_tracking_uri() if tracking.tracking_uri is None or mlflow.active_run() else tracking.tracking_uri
    try:  # the content too: whatever fails here is the logging's failure (exit 4), never the audit's
        metrics = metric_names(record.report) if record.report is not None else {}
        for prefix, report in record.compared.items():
            metrics.update(metric_names(report, f"{prefix}/"))
        options = record.options if record.options is not None else recorded_options(record.report)
        params = param_values(record.command, options)
        content = _Content(metrics, params, run_tags(record), documents_of(record), record)
        with _quiet_client():
            return _log(mlflow, tracking, content, str(uri))
    except MacsAuditError:
        raise
    except Exception as exc:  # whatever the store or the network raised: the outputs are written, say why not this
        raise IntegrationError(
            f"MLflow logging to {shown_uri(str(uri))} failed ({without_credentials(_reason(exc))}); the run's outputs "
            "are written: check "
            "--mlflow-tracking-uri (or $MLFLOW_TRACKING_URI) and the server, or drop --mlflow"
        ) from exc


@dataclasses.dataclass(frozen=True)
class _Content:
    metrics: dict[str, float]
    params: dict[str, str]
    tags: dict[str, str]
    documents: dict[str, str | bytes]
    record: RunRecord


def _log(mlflow: ModuleType, tracking: Tracking, content: _Content, uri: str) -> Logged:
    """The logging, in few round trips: the run (found, or created with its tags), its values in log_batch calls,
    the files, the documents in one call, the run ended."""
    active = mlflow.active_run()
    run_id = active.info.run_id if active is not None else os.environ.get("MLFLOW_RUN_ID") or None
    existing = run_id is not None  # a run already going: logged into, left running
    client = mlflow.MlflowClient(uri)
    record = content.record
    if run_id is not None:
        run = client.get_run(run_id)
        params = _new_params(run.data.params, content.params, run_id)
        experiment_id, tags = run.info.experiment_id, content.tags
    else:
        name = tracking.experiment or record.model_name
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(name)
        run_name = tracking.run_name or f"{record.model_name} {record.command}"
        run_id = client.create_run(experiment_id, tags=content.tags, run_name=run_name).info.run_id
        params, tags = content.params, {}
    try:
        _log_values(client, run_id, content.metrics, record.curve, params, tags)
        for path in record.files:
            client.log_artifact(run_id, str(path))
        if content.documents:
            with tempfile.TemporaryDirectory(prefix="macs-audit-mlflow-") as folder:
                for name, data in content.documents.items():
                    target = Path(folder, name)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data.encode() if isinstance(data, str) else data)
                client.log_artifacts(run_id, folder)
    except BaseException:
        if not existing:  # the new run says it failed
            with contextlib.suppress(Exception):
                client.set_terminated(run_id, "FAILED")
        raise
    if not existing:
        client.set_terminated(run_id)
    return Logged(run_id, experiment_id, shown_uri(uri), existing)


def _new_params(held: Mapping[str, str], params: dict[str, str], run_id: str) -> dict[str, str]:
    """The parameters an existing run does not hold yet; IntegrationError where it holds one with another value
    (MLflow never changes a parameter)."""
    for key, value in params.items():
        if key in held and held[key] != value:
            raise IntegrationError(
                f"the MLflow run {run_id} already has the parameter {key} = {_cut(held[key], 80)!r}, not "
                f"{_cut(value, 80)!r}; log this run into a run of its own (mlflow.start_run(nested=True)) or "
                "unset MLFLOW_RUN_ID"
            )
    return {key: value for key, value in params.items() if key not in held}


def _log_values(
    client: Any,
    run_id: str,
    metrics: Mapping[str, float],
    curve: Sequence[tuple[int, Mapping[str, float]]],
    params: Mapping[str, str],
    tags: Mapping[str, str],
) -> None:
    """Metrics (step 0), the curve's (at their steps), parameters and tags, in as few log_batch calls as MLflow's
    limits allow."""
    from mlflow.entities import Metric as MlflowMetric
    from mlflow.entities import Param, RunTag

    now = int(time.time() * 1000)
    values = [MlflowMetric(key, value, now, 0) for key, value in metrics.items()]
    values += [
        MlflowMetric(safe_path(key), number, now, step)
        for step, points in curve
        for key, value in points.items()
        if (number := _number(value)) is not None
    ]
    param_list = [Param(key, value) for key, value in params.items()]
    tag_list = [RunTag(key, value) for key, value in tags.items()]
    while values or param_list or tag_list:
        batch_params, param_list = param_list[:MAX_PARAMS_OR_TAGS], param_list[MAX_PARAMS_OR_TAGS:]
        batch_tags, tag_list = tag_list[:MAX_PARAMS_OR_TAGS], tag_list[MAX_PARAMS_OR_TAGS:]
        room = min(MAX_METRICS, MAX_ENTITIES - len(batch_params) - len(batch_tags))
        batch_metrics, values = values[:room], values[room:]
        client.log_batch(run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags)


def safe_path(name: str) -> str:
    """A metric name whose parts (between the slashes) each follow `safe_name`."""
    return "/".join(safe_name(part) for part in name.split("/"))


def shown_uri(uri: str) -> str:
    """A tracking URI as messages show it: without the user name and password a URL may carry."""
    return without_credentials(uri)


def _reason(exc: BaseException) -> str:
    """Why the logging failed, in a few words: the network's own error where one lies under it (Connection
    refused, a name not found), else the first line of what MLflow said."""
    seen, current = set(), exc  # type: tuple[set[int], BaseException | None]
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, TimeoutError, socket.gaierror)):
            return _cut(str(current) or type(current).__name__, 300)
        current = current.__cause__ or current.__context__
    first = (str(exc).strip().splitlines() or [""])[0]
    return _cut(f"{type(exc).__name__}: {first}", 500)


@contextlib.contextmanager
def _quiet_client() -> Iterator[None]:
    """While MLflow logs: its log lines and warnings held back (the core never prints), and its HTTP retries
    short where the environment does not set them (HTTP_DEFAULTS). Both restored after."""
    unset = [name for name in HTTP_DEFAULTS if name not in os.environ]
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in loggers]
    os.environ.update({name: HTTP_DEFAULTS[name] for name in unset})
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name in unset:
            os.environ.pop(name, None)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class TrainingCurve:
    """A progress callback that keeps each training step's values (the terms of finetune's epoch stages, which
    count steps: TRAINING_UNIT) and passes every call on to `then`; `points` numbers them by optimizer step."""

    def __init__(self, then: ProgressFn | None = None) -> None:
        self.then = then
        self.epochs: dict[str, list[tuple[int, int, dict[str, float]]]] = {}  # stage -> (done, total, values)

    def __call__(self, stage: Stage | str, done: int, total: int, terms: dict[str, float] | None = None, /) -> None:
        if terms and isinstance(stage, Stage) and stage.unit == TRAINING_UNIT:
            self.epochs.setdefault(stage.name, []).append((done, total, dict(terms)))
        if self.then is not None:
            self.then(stage, done, total, terms)

    def points(self, history: Sequence[Mapping[str, Any]]) -> list[tuple[int, dict[str, float]]]:
        """(optimizer step, `train/<term>` -> value) of each step recorded, and (the epoch's last step,
        `val/<metric>` -> value) of each epoch of `history` (finetune's, one entry per epoch with its last step and
        validation metrics). A step's number is counted back from its epoch's last: the epochs recorded are the
        last of the history (a resumed run records only its own)."""
        ends = [int(entry["step"]) for entry in history][-len(self.epochs) :] if self.epochs else []
        points = [
            (end - (total - done), {f"train/{key}": value for key, value in values.items()})
            for steps, end in zip(self.epochs.values(), ends, strict=False)  # each epoch recorded ends in the history
            for done, total, values in steps
        ]
        points += [(int(entry["step"]), {f"val/{k}": v for k, v in entry["val"].items()}) for entry in history]
        return points
