from __future__ import annotations

from django.db import models


class Receipt(models.Model):
    """One row per job a handler (or a request) wrote, unique by job."""

    job_id = models.BigIntegerField(unique=True)
    note = models.CharField(max_length=100, default="")
