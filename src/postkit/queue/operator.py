# Generated from operator_async.py by tools/async_to_sync.py: edit that file, not this one.
"""What an operator does: look into queues, jobs, dead letters and workers, and steer them.

operator_async.py is the source of both: :class:`AsyncOperator` is written here, and
operator.py (``Operator``) is generated from it by tools/async_to_sync.py. Its calls live in
the parts it is made of: queues (operations_async.py), dead letters (dead_letters_async.py) and
schedules (schedules_async.py).
"""

from __future__ import annotations

from postkit.queue.dead_letters import DeadLetters
from postkit.queue.operations import Operations
from postkit.queue.schedules import Schedules


class Operator(Operations, DeadLetters, Schedules):
    """Inspect and steer: queue statistics, settings and pauses, job listings, cancels and
    purges, dead letters and their redrive, schedules, and the workers. A role needs the
    ``operator`` access kind (``postkit install --grant ROLE:operator``); reading dead letters
    needs only ``worker``, as the worker's maintenance fires schedules and prunes with it."""
