"""Progress on stderr: the CLI's implementation of the core's progress callback (macs_audit.progress), as a
bar on a terminal and as plain, timed lines in a log."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Callable

from macs_audit.cli.console import stderr
from macs_audit.progress import as_stage

LINE_INTERVAL = 10.0  # seconds between the plain progress lines of a running stage
MIN_RATE_SECONDS = 1.0  # a rate (and so an ETA) is shown only once a stage has run this long


def clock_time(seconds: float) -> str:
    """0:07, 12:34 or 1:02:03: a time since the start, or an ETA."""
    s = int(round(seconds))
    hours, rest = divmod(s, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def duration(seconds: float) -> str:
    """How long a stage took: 0.4 s, 12.3 s, then as clock_time."""
    return f"{seconds:.1f} s" if seconds < 60 else clock_time(seconds)


@dataclasses.dataclass
class Running:
    """One progress stage while it runs: its counts and when they were seen.

    The audit reports each stage when it begins (done 0), so its time and rate are its own. A caller that
    reports a stage only after its first batch leaves its start unknown: the previous event (of any stage)
    is then the best guess, and the rate is measured from that first report (`first_time`, `first_done`),
    since dividing by the time since the stage was first seen would give the first batch no time at all
    and read millions of images per second."""

    name: str
    total: int
    unit: str  # what the counts count (images, resamples, steps); "" for a single step
    started: float  # when the stage began: its done-0 report, else the previous progress event
    first_time: float
    first_done: int
    done: int = 0
    terms: dict | None = None
    updated: float = 0.0
    finished: bool = False

    def rate(self, now: float) -> float | None:
        """Units per second since the first report, once MIN_RATE_SECONDS have passed (none for one step)."""
        span = now - self.first_time
        if span < MIN_RATE_SECONDS or self.done <= self.first_done or self.total <= 1 or not self.unit:
            return None
        return (self.done - self.first_done) / span

    def rate_text(self, now: float) -> str:
        rate = self.rate(now)
        if rate is None:
            return ""
        per = "img/s" if self.unit == "images" else f"{self.unit}/s"
        return f"{rate:,.0f} {per}" if rate >= 100 else f"{rate:.1f} {per}"

    def eta(self, now: float) -> float | None:
        rate = self.rate(now)
        return None if not rate else max(0, self.total - self.done) / rate


class Progress:
    """Progress of the core's stages on stderr, from its `progress(stage, done, total, terms)` calls: a
    macs_audit.progress.Stage (a name and what its counts count), or a name alone (a stage of images, of
    steps when the call carries loss terms).

    On a terminal: a rich bar per stage with its rate, or the loss terms of the current training step.
    Elsewhere (a CI log, a file): plain lines, one when a stage starts and one when it ends, and every
    `interval` seconds one per running stage with percent, rate and ETA. Nothing when not `enabled`
    (--quiet). `clock`, `terminal` and `write` are for tests: a fake clock, the mode, the line sink."""

    def __init__(
        self,
        enabled: bool = True,
        *,
        interval: float = LINE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        terminal: bool | None = None,
        write: Callable[[str], None] | None = None,
    ):
        self.enabled = enabled
        self.bar = enabled and (interactive_stderr() if terminal is None else terminal)
        self.lines = enabled and not self.bar
        self.interval, self.clock = interval, clock
        self._write = write or (lambda line: stderr.print(line, markup=False, highlight=False, soft_wrap=True))
        self._stages: dict[str, Running] = {}
        self._began = self._last_event = self._next_line = 0.0
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}
        if self.bar:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                console=stderr,
                transient=False,
            )

    def __enter__(self) -> Progress:
        self._began = self._last_event = self.clock()
        self._next_line = self._began + self.interval
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def __call__(self, description: Any, done: int, total: int, terms: dict | None = None) -> None:
        if not self.enabled:
            return
        now = self.clock()
        described = as_stage(description)
        name = described.name
        stage = self._stages.get(name)
        new = stage is None or stage.finished  # a finished stage reported again starts anew
        if stage is None or stage.finished:
            began = now if done == 0 else self._last_event  # done 0: the stage says when it began
            stage = Running(name, total, described.unit, began, now, done)
            self._stages[name] = stage
        stage.total, stage.done, stage.updated = total, done, now
        stage.terms = terms if terms is not None else stage.terms
        stage.finished = done >= total
        self._last_event = now
        if self._bar is not None:
            self._update_bar(stage, now)
            return
        if stage.finished:
            self._write(self._end_line(stage, now))
        elif new:
            self._write(self._start_line(stage, now))
        if now >= self._next_line:
            for running in self._stages.values():
                # Running stages reported since the last line, less one whose start was just printed.
                recent = running.updated >= self._next_line - self.interval
                if recent and not running.finished and running.first_time < now:
                    self._write(self._status_line(running, now))
            self._next_line = now + self.interval

    # -- the rich bar (a terminal) ------------------------------------------------------------------

    def _update_bar(self, stage: Running, now: float) -> None:
        if stage.name not in self._tasks:
            self._tasks[stage.name] = self._bar.add_task(stage.name, total=stage.total, rate="")
        if stage.terms is None:
            text = stage.rate_text(now)
        else:
            text = "  ".join(f"{k} {v:.4g}" for k, v in stage.terms.items())
        self._bar.update(self._tasks[stage.name], total=stage.total, completed=stage.done, rate=text)

    # -- plain lines (a log) ------------------------------------------------------------------------

    def _prefix(self, now: float) -> str:
        return f"[{clock_time(now - self._began)}]"

    def _count(self, stage: Running, done: int | None = None) -> str:
        if stage.total <= 1 or not stage.unit:  # a single step (validation, a fit): no count to show
            return ""
        if done is None:
            return f"{stage.total:,} {stage.unit}"
        return f"{done:,}/{stage.total:,} {stage.unit}"

    def _terms(self, stage: Running) -> str:
        if not stage.terms:
            return ""
        return "; " + " ".join(f"{k} {v:.4g}" for k, v in stage.terms.items())

    def _start_line(self, stage: Running, now: float) -> str:
        """Stamped with when the stage began (its done-0 report, else the previous event), so that the time
        between its start and end lines is the duration its end line gives."""
        count = self._count(stage)
        return f"{self._prefix(stage.started)} {stage.name}: started" + (f", {count}" if count else "")

    def _status_line(self, stage: Running, now: float) -> str:
        if stage.done == 0:  # begun, with nothing counted yet (a bootstrap reports only its start and end)
            return f"{self._prefix(now)} {stage.name}: running for {duration(now - stage.started)}"
        parts = [f"{100 * stage.done / max(1, stage.total):.0f}%"]
        count = self._count(stage, stage.done)
        if count:
            parts[0] += f" ({count})"
        rate, eta = stage.rate_text(now), stage.eta(now)
        if rate:
            parts.append(rate)
        if eta is not None:
            parts.append(f"ETA {clock_time(eta)}")
        return f"{self._prefix(now)} {stage.name}: {', '.join(parts)}{self._terms(stage)}"

    def _end_line(self, stage: Running, now: float) -> str:
        count = self._count(stage)
        text = f"{self._prefix(now)} {stage.name}: done" + (f", {count}" if count else "")
        text += f" in {duration(now - stage.started)}"
        rate = stage.rate_text(now)
        return text + (f" ({rate})" if rate else "") + self._terms(stage)


def interactive_stderr() -> bool:
    """Whether stderr can redraw a progress bar: a TTY (FORCE_COLOR in a CI log does not make one) that rich
    does not rule out (a dumb terminal, TTY_INTERACTIVE=0)."""
    try:
        return stderr.is_interactive and sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


def show_progress(quiet: bool) -> bool:
    """Whether to show progress at all: a bar on a terminal, plain lines elsewhere."""
    return not quiet
