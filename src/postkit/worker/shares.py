"""How a worker that serves several queues shares each claim's free slots between them.

Each claim round trip tries the queues in turn, from a first queue that changes at every round,
and gives each, first, up to its share of the free slots; the slots left then go to the queues
that filled their share (``Fetcher.settle_and_claim``). A queue's weight (``Worker(queues={...})``,
1 unless given) sets both: its share of a round's slots is its part of the weights' sum, and
the first queue is chosen by smooth weighted round robin (as nginx balances upstreams), so
that queues weighing 3 and 1 go first 3 rounds in 4 and 1 in 4, spread out (A A B A), even when
each round has a single free slot. With equal weights the first queue simply rotates and each
share is an equal part: a queue with a deep backlog cannot crowd out another's jobs, and one
weighing more gets more of the worker while both have work, and none of it while it has none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from postkit.queue.protocol import checks as check


class Shares:
    """The order and the shares of one worker's queues, round after round."""

    def __init__(self, queues: Sequence[str], weights: Mapping[str, int] | None = None) -> None:
        """
        Raises:
            ValueError: a weight is not an int from 1 to 1000, or names a queue not served
                (``InvalidFlowControlError``, the SDK's check of ``pull_any``'s weights).
        """
        self.queues = list(queues)
        self.weights = check.queue_weights(self.queues, weights or {}, among="served by the worker")
        self._total = sum(self.weights)
        self._current = [0] * len(self.queues)

    def next_order(self) -> list[str]:
        """The queues in the order this round tries them: the first chosen by smooth weighted
        round robin, the others after it in the worker's order."""
        for position, weight in enumerate(self.weights):
            self._current[position] += weight
        first = max(range(len(self.queues)), key=lambda position: self._current[position])
        self._current[first] -= self._total
        count = len(self.queues)
        return [self.queues[(first + offset) % count] for offset in range(count)]

    def share(self, queue: str, free: int) -> int:
        """How many of a round's ``free`` slots ``queue`` may take first: its part of the
        weights, rounded up (so that every queue may take one)."""
        return math.ceil(free * self.weights[self.queues.index(queue)] / self._total)
