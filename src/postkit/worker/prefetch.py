"""How many jobs a worker holds claimed ahead of its free slots: its prefetch.

A prefetched job is claimed and waits, its claim heartbeated like a running one, for a handler
slot to free. Prefetch pays where handlers are quick: each settle-and-claim round trip then
claims a batch big enough to keep the slots busy until the next one, so the round trips and
their commits are spread over many jobs. Where handlers are slow it buys nothing and costs
fairness: jobs held here wait while another worker might be idle.

So by default the prefetch follows what the worker measures: about :data:`WINDOW` seconds of
the jobs this worker settles (its rate, taken over the last stretch of at least
:data:`SAMPLE` seconds), never fewer than ``concurrency`` (the fixed default it had before,
which a worker of slow jobs keeps) and never more than :data:`MOST`. A worker draining no-op
jobs at 7,000 a second holds :data:`MOST`; one running 8 one-second jobs at a time holds 8.
The batch of a round trip is the free capacity, so it follows too. A fixed ``prefetch`` turns
the adaptation off (``prefetch=0`` claims only for free slots).

What the adaptive prefetch costs: when handlers slow down suddenly, the jobs already held wait
their turn (at most :data:`MOST`, the rate falls and no more are claimed beyond
``concurrency`` until they have run); their claims are heartbeated, so none is lost or
delivered twice for it. Measured in benchmarks/results/comparison.md (the defaults row).
"""

from __future__ import annotations

import math
import time

WINDOW = 0.1
"""Seconds of the measured settle rate that the adaptive prefetch holds claimed."""
SAMPLE = 0.1
"""The shortest stretch (seconds) the settle rate is taken over."""
MOST = 500
"""The adaptive prefetch's ceiling, in jobs (pull claims at most 1,000 per call)."""


class Prefetch:
    """The worker's prefetch: fixed, or following the settle rate. See the module docstring."""

    def __init__(
        self, concurrency: int, fixed: int | None = None, *, now: float | None = None
    ) -> None:
        """
        Args:
            concurrency: the worker's handler slots: the adaptive prefetch's floor.
            fixed: a prefetch that never changes (0: none); None adapts.
            now: when the first sample begins (``time.monotonic()``; default: now).

        Raises:
            ValueError: ``concurrency`` is not positive, or ``fixed`` is negative.
        """
        if concurrency < 1:
            raise ValueError("concurrency must be positive")
        if fixed is not None and fixed < 0:
            raise ValueError("prefetch must be zero or positive")
        self.concurrency = concurrency
        self.fixed = fixed
        self._jobs = fixed if fixed is not None else concurrency
        self._sample_total = 0  # the settle count when the sample began
        self._sample_start = time.monotonic() if now is None else now

    @property
    def adaptive(self) -> bool:
        """Whether the prefetch follows the settle rate."""
        return self.fixed is None

    @property
    def jobs(self) -> int:
        """How many jobs to hold claimed beyond the running ones, now."""
        return self._jobs

    @property
    def capacity(self) -> int:
        """How many jobs to hold claimed in all: running, and waiting for a slot."""
        return self.concurrency + self._jobs

    def observe(self, settled_total: int, now: float | None = None) -> None:
        """Take the worker's count of jobs settled so far (acked, retried, failed, released or
        given up on; :attr:`Claims.settled_total <postkit.worker.claims.Claims>`). Once the
        sample since the last change spans :data:`SAMPLE` seconds, the adaptive prefetch
        becomes :data:`WINDOW` seconds of its rate, from ``concurrency`` to :data:`MOST`. The
        fetcher calls this before every claim and at every wake-up, idle ones included, so a
        worker that went quiet starts its next burst at ``concurrency`` again."""
        if self.fixed is not None:
            return
        now = time.monotonic() if now is None else now
        elapsed = now - self._sample_start
        if elapsed < SAMPLE - 1e-9:
            return
        # Less a hair, so that a rate of exactly n jobs per WINDOW is n, not n + 1.
        held = math.ceil((settled_total - self._sample_total) * WINDOW / elapsed - 1e-6)
        self._jobs = min(max(held, self.concurrency), MOST)
        self._sample_total = settled_total
        self._sample_start = now


__all__ = ["MOST", "SAMPLE", "WINDOW", "Prefetch"]
