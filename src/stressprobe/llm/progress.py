"""Progress of a job's model calls: lines in the job's log, and a live bar when stderr is a terminal.

A judge cell at paper scale runs for hours; its log says how far it is. Every `Client.generate` call is a
batch: for a batch of at least `MIN_BATCH` requests (a judge cell, the summaries, an evaluation) a line is
written whenever 5 % more of it is done or 30 s have passed, whichever comes first, and when it ends. Jobs
that call the model in many small batches (the CDV search) get a line every 30 s with the job's totals,
and a last one when the client closes. A background thread keeps the 30 s promise while one call blocks
(a GPU batch, a slow API).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from stressprobe.llm.usage import Usage, cost_usd

log = logging.getLogger("stressprobe.progress")

EVERY_S = 30.0
EVERY_FRACTION = 0.05
MIN_BATCH = 20
BAR_EVERY_S = 0.25
BAR_WIDTH = 24


def report_due(
    done: int,
    total: int,
    last_done: int,
    now: float,
    last_time: float,
    every_s: float = EVERY_S,
    every_fraction: float = EVERY_FRACTION,
) -> bool:
    """Whether a progress line is due: the batch is complete, a new `every_fraction` of it is done since
    the last line, or `every_s` seconds have passed since it."""
    if total and done >= total > last_done:
        return True
    if now - last_time >= every_s:
        return True
    if not total:
        return False
    step = max(1, math.ceil(total * every_fraction))
    return done // step > last_done // step


def format_duration(seconds: float) -> str:
    """4s, 2m05s, 3h07m: short enough for a log line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(
    label: str,
    done: int,
    total: int | None,
    fresh: int,
    elapsed: float,
    usage: Usage,
    price: Mapping[str, float] | None,
    hits: int | None = None,
) -> str:
    """One progress line: done/total, calls/s, ETA (when the total is known), tokens, cost, cache hits.

    `fresh` of the `done` requests were computed by the model in `elapsed` seconds (the rate's basis);
    tokens, cost and cache hits (`hits`, default the usage's) are the job's so far.
    """
    hits = usage.cache_hits if hits is None else hits
    rate = fresh / elapsed if elapsed > 0 else 0.0
    parts = []
    if total:
        parts.append(f"{done}/{total} ({100 * done / total:.0f}%)")
    parts.append(f"{rate:.2f} calls/s")
    if total and done < total:
        parts.append(f"ETA {format_duration((total - done) / rate)}" if rate > 0 else "ETA unknown")
    tokens = usage.prompt_tokens + usage.completion_tokens
    cost = cost_usd(usage.prompt_tokens, usage.completion_tokens, price)
    parts.append(
        f"job so far: {usage.calls_made} calls, {hits} cache hits, {usage.errors} errors, "
        f"{tokens:,} tokens ({usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} completion), "
        f"${cost:.4f}"
    )
    return f"{label}: " + ", ".join(parts)


def progress_bar(label: str, done: int, total: int, rate: float) -> str:
    """A one-line bar for a terminal."""
    filled = BAR_WIDTH * done // total if total else 0
    eta = f" ETA {format_duration((total - done) / rate)}" if rate > 0 and done < total else ""
    return f"{label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} {rate:.2f}/s{eta}"


def wants_bar(stream: TextIO) -> bool:
    """A live bar only on a terminal that can redraw a line."""
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


class Progress:
    """Progress of one client's calls; `begin`/`advance`/`finish` per batch, `close` at the end."""

    def __init__(
        self,
        label: str,
        price: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[str], None] = log.info,
        stream: TextIO | None = None,
        heartbeat: bool = True,
        every_s: float = EVERY_S,
    ) -> None:
        self.label = label
        self.price = price
        self.clock = clock
        self.emit = emit
        self.every_s = every_s
        self.stream = stream if stream is not None else sys.stderr
        self.bar = wants_bar(self.stream)
        self.heartbeat = heartbeat
        self.usage = Usage()
        self.batches = 0
        self.lines = 0
        self.started = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._batch_open = False
        self._bar_open = False
        self.total = self.done = self.fresh = self.cached = self.last_done = 0
        self.batch_start = self.last_time = self.last_bar = self.started

    @property
    def big(self) -> bool:
        """Whether the current batch is a job's main batch (its own done/total and ETA are reported)."""
        return self.total >= MIN_BATCH

    def begin(self, total: int, cached: int, usage: Usage) -> None:
        """A batch of `total` distinct requests, `cached` of them already answered."""
        with self._lock:
            self.batches += 1
            self.usage = usage
            self.total, self.done, self.fresh, self.cached = total, cached, 0, cached
            self.batch_start = self.clock()
            self._batch_open = True
            # A batch answered entirely from the cache gets its one line when it finishes.
            self.last_done = cached if cached < total else 0
            if self.big and cached < total:
                self._line(
                    f"{self.label}: {total} requests, {cached} answered from the cache, "
                    f"{total - cached} to compute"
                )
        if self.heartbeat and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
            self._thread.start()

    def advance(self, usage: Usage) -> None:
        """One request of the batch answered by the model now (the client's usage has counted it)."""
        with self._lock:
            self.usage = usage
            self.done += 1
            self.fresh += 1
            self._maybe_report(self.clock())

    def finish(self, usage: Usage) -> None:
        """The batch is answered (including answers other jobs computed meanwhile)."""
        with self._lock:
            self.usage = usage
            self.done = self.total
            self._batch_open = False  # the usage now counts the batch's cache hits
            if self.big and self.last_done < self.total:
                self._report(self.clock())
            if self._bar_open and self.big:
                self._draw(self.clock())
                self._end_bar()

    def close(self) -> None:
        """Stop the heartbeat; a job of several batches gets a last line with its totals."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        with self._lock:
            if self.batches > 1 or (self.batches == 1 and not self.big):
                elapsed = self.clock() - self.started
                label = f"{self.label} finished in {format_duration(elapsed)}"
                usage = self.usage
                self._line(progress_line(label, 0, None, usage.calls_made, elapsed, usage, self.price))
            self._end_bar()

    def _maybe_report(self, now: float) -> None:
        if self.big:
            due = report_due(self.done, self.total, self.last_done, now, self.last_time, self.every_s)
        else:  # a small batch of a longer loop: its own percentages mean nothing
            due = now - self.last_time >= self.every_s
        if due:
            self._report(now)
        if self.bar and now - self.last_bar >= BAR_EVERY_S:
            self._draw(now)

    def _report(self, now: float) -> None:
        elapsed = now - self.batch_start
        total = self.total if self.big else None
        # The client counts a batch's cache hits when the batch ends; until then they are this batch's.
        usage = self.usage
        hits = usage.cache_hits + (self.cached if self._batch_open else 0)
        self._line(progress_line(self.label, self.done, total, self.fresh, elapsed, usage, self.price, hits))
        self.last_done = self.done

    def _line(self, text: str) -> None:
        self.emit(text)
        self.lines += 1
        self.last_time = self.clock()

    def _draw(self, now: float) -> None:
        elapsed = now - self.batch_start
        rate = self.fresh / elapsed if elapsed > 0 else 0.0
        try:
            self.stream.write("\r" + progress_bar(self.label, self.done, self.total, rate) + "\x1b[K")
            self.stream.flush()
        except (OSError, ValueError):
            self.bar = False  # a closed terminal ends the bar, never the job
            return
        self.last_bar = now
        self._bar_open = True

    def _end_bar(self) -> None:
        if self._bar_open:
            self._bar_open = False
            try:
                self.stream.write("\n")
            except (OSError, ValueError):
                self.bar = False

    def _beat(self) -> None:
        """Keep the time promise while a single call blocks for longer than `every_s`."""
        while not self._stop.wait(min(self.every_s, 5.0)):
            with self._lock:
                if self._batch_open and self.clock() - self.last_time >= self.every_s:
                    self._report(self.clock())
