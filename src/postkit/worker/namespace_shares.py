"""How the namespaces of a :class:`~postkit.worker.SharedWorker` share its slots.

A shared worker runs one :class:`~postkit.worker.Worker` per namespace in one process, each
with its own connections, listener and maintenance (a claim stays in one namespace: the Citus
rule). This object is what they share: ``concurrency`` slots, which bound the jobs the
namespaces hold claimed together, so that no more than ``concurrency`` handlers run at once in
the process.

The namespaces that want jobs share the slots by weight, and the others' share is theirs:

- A namespace *wants* jobs from the moment its fetcher asks for slots until a claim of it
  comes back with fewer jobs than it was given slots (its queues ran dry). A notification or
  the fallback poll makes it ask again.
- Each namespace that wants jobs is owed its part of the slots, by its weight among the
  namespaces that want jobs (at least one slot). A namespace whose queues are dry is owed
  nothing, so the others may take every slot: the sharing is work conserving.
- A fetcher that asks gets, of the free slots, what it is owed and does not hold yet, and of
  the rest what the other wanting namespaces are not owed. So a namespace that held every
  slot while the others were idle keeps the ones it holds (a running job is never taken
  back), and as its jobs settle their slots go to the namespaces below their part, until each
  holds its part: within one job's run time per slot, as for a fair queue's group that starts.
- When a slot frees, or a fetcher is given fewer slots than were free, the namespaces that
  want jobs and may now be given some are woken (their fetchers' wake-up), each at once.

Counting: a namespace holds the jobs its worker's claims hold (waiting or running) plus the
slots given to a claim in flight, so two fetchers claiming at once never share a slot. The
workers of a shared worker hold no prefetch (a job held waiting in one namespace would be a slot
another namespace's job could run in).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from postkit.queue.protocol import checks as check


@dataclass
class _Member:
    weight: int
    held: Callable[[], int] | None = None
    wake: Callable[[], None] | None = None
    in_flight: int = 0
    wanting: bool = False


class NamespaceShares:
    """The slots a shared worker's namespaces share, by weight. See the module docstring.
    Thread-safe."""

    def __init__(self, concurrency: int, weights: Sequence[str] | Mapping[str, int]) -> None:
        """
        Args:
            concurrency: the slots, shared by every namespace.
            weights: the namespaces, or a mapping of each to its weight (1 to 1000,
                :data:`postkit.queue.limits.NAMESPACE_WEIGHT`).

        Raises:
            ValueError: a str, no namespace, a namespace twice or not a valid name, a weight out of
                bounds, or ``concurrency`` below 1 (the weight's and name's errors are the
                SDK's ``InvalidFlowControlError`` and ``InvalidNameError``).
        """
        if concurrency < 1:
            raise ValueError("concurrency must be positive")
        if isinstance(weights, str):
            # A str is a sequence of one-letter namespaces: refused, not served letter by letter.
            raise ValueError(
                f"namespaces must be a list of namespaces or a mapping of each to its weight, "
                f"got the str {weights!r} (one namespace: [{weights!r}])"
            )
        names = list(weights)
        if not names:
            raise ValueError("a shared worker needs at least one namespace")
        if len(set(names)) != len(names):
            raise ValueError(f"a namespace is listed twice: {names}")
        for namespace in names:
            check.name("namespace", namespace, required=True)
        given = weights if isinstance(weights, Mapping) else {}
        self.concurrency = concurrency
        self.weights = dict(
            zip(
                names,
                check.namespace_weights(names, given),
                strict=True,
            )
        )
        self._lock = threading.Lock()
        self._members = {namespace: _Member(weight) for namespace, weight in self.weights.items()}

    def join(self, namespace: str, *, held: Callable[[], int], wake: Callable[[], None]) -> None:
        """The worker of ``namespace`` starts: ``held()`` counts the jobs its claims hold, and
        ``wake()`` makes its fetcher ask for slots again."""
        with self._lock:
            member = self._members[namespace]
            member.held, member.wake = held, wake

    def leave(self, namespace: str) -> None:
        """The worker of ``namespace`` stops claiming: it is owed nothing any more."""
        with self._lock:
            self._members[namespace].wanting = False
        self._wake_others(namespace)

    def reserve(self, namespace: str, wanted: int) -> int:
        """The fetcher of ``namespace`` wants ``wanted`` jobs: how many it may claim now, which
        it holds until :meth:`claimed` gives back what it did not use. It wants jobs from now
        on, even when given none: it is woken when it may have some."""
        if wanted <= 0:
            return 0
        with self._lock:
            self._members[namespace].wanting = True
            given = min(wanted, self._may_take(self._holding(), self._owed())[namespace])
            self._members[namespace].in_flight += given
        return given

    def claimed(self, namespace: str, given: int, jobs: int) -> None:
        """The claim given ``given`` slots by :meth:`reserve` took ``jobs`` jobs (now held by
        the worker's claims, or 0 if it failed): fewer means its queues ran dry, and it wants
        no more jobs until it asks again."""
        with self._lock:
            member = self._members[namespace]
            member.in_flight -= given
            if jobs < given:
                member.wanting = False
        if jobs < given:
            self._wake_others(namespace)

    def offer(self, namespace: str) -> None:
        """The worker of ``namespace`` has freed slots (its jobs settled): wake the namespaces
        that want jobs and may now be given some."""
        self._wake_others(namespace)

    def owed(self) -> dict[str, int]:
        """Each namespace's part of the slots now (0 for one that wants no jobs)."""
        with self._lock:
            return self._owed()

    def _owed(self) -> dict[str, int]:
        wanting = {name: m.weight for name, m in self._members.items() if m.wanting}
        total = sum(wanting.values())
        return {
            name: max(1, self.concurrency * wanting[name] // total) if name in wanting else 0
            for name in self._members
        }

    def _holding(self) -> dict[str, int]:
        """What each namespace holds now (under the lock): its claimed jobs, and the slots
        given to a claim in flight."""
        return {
            name: (member.held() if member.held is not None else 0) + member.in_flight
            for name, member in self._members.items()
        }

    def _may_take(self, holding: dict[str, int], owed: dict[str, int]) -> dict[str, int]:
        """What each namespace may be given now: its own debt, and of the free slots what the
        other wanting namespaces are not owed. Read once for all of them: a wake-up's look at
        every namespace counts each one's jobs once."""
        free = self.concurrency - sum(holding.values())
        debts = {name: max(owed[name] - holding[name], 0) for name in self._members}
        total_debt = sum(debts.values())
        return {
            name: 0 if free <= 0 else min(free, max(debts[name], free - (total_debt - debt)))
            for name, debt in debts.items()
        }

    def _wake_others(self, namespace: str) -> None:
        # Woken outside the lock: a wake-up takes the fetcher's claims lock, which the
        # fetcher may hold while it counts its jobs for held().
        with self._lock:
            may_take = self._may_take(self._holding(), self._owed())
            due = [
                member.wake
                for name, member in self._members.items()
                if name != namespace
                and member.wanting
                and member.wake is not None
                and may_take[name] > 0
            ]
        for wake in due:
            wake()


__all__ = ["NamespaceShares"]
