"""The worker's side: ``python manage.py postkit_worker signups.tasks`` runs these handlers.

The handler runs in ``postkit_django.transaction``, the transaction that acks its job on
Django's connection: its ORM write commits with the ack, exactly once, and rolls back with it
if the handler raises (the job is then retried) or its claim went stale.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from postkit.contrib import django as postkit_django
from postkit.queue import Job
from postkit.worker import Handlers
from signups.models import Signup

handlers = Handlers()


@handlers.register(
    "send_welcome", transactional=True, transaction=postkit_django.transaction, timeout=30
)
def send_welcome(job: Job, cursor: Any) -> None:
    """Send the welcome email (here: print it) and record when, with the ORM."""
    print(f"Welcome to the app, {job.payload['email']}!", flush=True)
    Signup.objects.filter(welcome_job=job.id).update(welcomed_at=timezone.now())
