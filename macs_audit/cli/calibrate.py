"""`macs-audit calibrate`: a post-hoc calibrator (temperature scaling by default, or the best of several) fitted on
the fit data, folded into a written model, and the before/after audit; or, with --predictions, fitted on saved
predictions and written as a portable calibration map (no model), which `calibrate MODEL --map` folds in. The
options come from the table (settings/table.py) through the flags and the spec's calibrate table; the run itself is
macs_audit.calibrating."""

from __future__ import annotations

from typing import Any

from macs_audit.cli.console import handle_errors, note, state, warn, warn_about_model
from macs_audit.cli.output import log_to_mlflow, print_before_after, print_calibrators
from macs_audit.cli.parameters import given_values, takes_options
from macs_audit.cli.progress import Progress, show_progress


@handle_errors
@takes_options("calibrate")
def calibrate(**values: Any) -> None:
    """Fit a post-hoc calibrator on --data and write MODEL with it folded in, audited before and after; with
    --predictions FILE (no MODEL), fit it on saved predictions and write OUT/calibration_map.json; with --map FILE,
    fold such a map into MODEL. Options not given come from the spec (its calibrate table; see --config)."""
    from macs_audit.before_after import BEFORE, BEFORE_AFTER_FILES, Fix, which_fix
    from macs_audit.calibrating import (
        CALIBRATION_FILE,
        calibrate_predictions_resolved,
        calibrate_resolved,
        fitted_name,
    )
    from macs_audit.integrations.mlflow import RunRecord, Tracking, before_after_record
    from macs_audit.settings.resolve import resolve

    resolved = resolve("calibrate", *given_values(values))
    tracking = Tracking.of(resolved)  # the mlflow extra, before the fit
    if resolved["predictions"] is not None:  # no model: the table the map was chosen by, and the map
        fitted = calibrate_predictions_resolved(resolved)
        for message in fitted.warnings:  # also in the map
            warn(message)
        print_calibrators(fitted.selection.to_dict())
        note(fitted.selection.reason)
        note(f"{fitted_name(fitted.calibrator)}; calibration map written to {fitted.path}")
        # No audit: the options, the tags and the map.
        name = resolved["predictions"].stem
        log_to_mlflow(tracking, RunRecord("calibrate", resolved.values, name=name, files=[fitted.path]))
        return
    with Progress(show_progress(resolved["quiet"])) as progress:
        run = calibrate_resolved(resolved, progress=progress, debug=state["debug"])
    warn_about_model(run.before.model.warnings)  # e.g. CIFAR-10's mean/std on a model they do not fit
    for message in run.notes:  # the fit data's classes in another order than the outputs, or the map folded in
        note(message)
    for message in run.fit_warnings:  # fit data lacking classes: before the table that refuses maps for it
        warn(message)
    if run.selection is not None:
        print_calibrators(run.selection.to_dict())
        note(run.selection.reason)
    # Which fix won on the evaluation data, by finetune's rule (before_after.which_fix): under the table, and last.
    won = which_fix([Fix("uncalibrated model", run.before), Fix(fitted_name(run.calibrator), run.after)])
    which = won.describe() if won is not None else None
    print_before_after(run.title, run.comparison, which=which)
    for message in run.warnings:  # also in OUT/calibration.json
        warn(message)
    written = f"{fitted_name(run.calibrator)}; calibrated model written to {run.model}"
    note(written + (f"; which fix: {which}" if which else ""))
    files = [resolved["out"] / name for name in (*BEFORE_AFTER_FILES, CALIBRATION_FILE)]
    log_to_mlflow(tracking, before_after_record("calibrate", resolved.values, run, files, which, {BEFORE: run.before}))
