"""Exponential backoff: the one way the worker runtime spaces out its tries after failures.

Every retry loop of the runtime (claims, the listener, settles, maintenance, the supervisor's
restarts) waits ``Backoff`` delays. The loops of the claim path use :meth:`Backoff.claim_path`,
to be back within a second of the server's return; settles and housekeeping use
:meth:`Backoff.housekeeping`, which need not hurry.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Past this many doublings every useful cap is reached; the bound keeps 2.0 ** n finite.
_MAX_DOUBLINGS = 64


@dataclass
class Backoff:
    """Waits that double with each consecutive failure, from ``base`` up to ``cap`` seconds.

    With ``jitter`` each wait is drawn at random from ``1 - jitter`` to 1 times its nominal
    length, so that clients that failed together (a server restart) do not retry together.
    """

    base: float
    """The wait after the first failure."""
    cap: float
    """The longest wait."""
    jitter: float = 0.0
    failures: int = 0
    """Consecutive failures so far."""

    def __post_init__(self) -> None:
        if not self.base > 0 or not self.cap > 0 or not 0 <= self.jitter < 1:
            raise ValueError("base and cap must be positive and jitter in [0, 1)")

    @classmethod
    def claim_path(cls) -> Backoff:
        """For the claim path and what it waits on (claims, acks, the listener, rescue and
        schedules): 0.2 s, 0.4 s, 0.8 s, then every second, jittered. A try costs one
        connection attempt, and the worker is back within a second of the server accepting
        connections again."""
        return cls(base=0.2, cap=1.0, jitter=0.5)

    @classmethod
    def housekeeping(cls, *, jitter: float = 0.5) -> Backoff:
        """For settles that failed, retention and vacuum: from 0.2 s doubling up to 30 s."""
        return cls(base=0.2, cap=30.0, jitter=jitter)

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` (1 or more) consecutive failures."""
        nominal = min(self.cap, self.base * 2.0 ** min(failures - 1, _MAX_DOUBLINGS))
        return nominal * random.uniform(1 - self.jitter, 1) if self.jitter else nominal

    def failure(self) -> float:
        """Count one more failure; return the seconds to wait before the next try."""
        self.failures += 1
        return self.delay(self.failures)

    def reset(self) -> None:
        """A try succeeded: the next failure waits ``base`` again."""
        self.failures = 0
