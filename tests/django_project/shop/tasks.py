"""The shop's handlers: each job of "receipts" writes one Receipt, in its ack's transaction on
Django's connection."""

from __future__ import annotations

from typing import Any

from postkit.contrib import django as postkit_django
from postkit.queue import Job
from postkit.worker import Handlers
from tests.django_project.shop.models import Receipt

handlers = Handlers()


@handlers.register("receipts", transactional=True, transaction=postkit_django.transaction)
def write_receipt(job: Job, cursor: Any) -> None:
    Receipt.objects.create(job_id=job.id, note=str(job.payload.get("note", "")))
