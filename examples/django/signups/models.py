from __future__ import annotations

from django.db import models


class Signup(models.Model):
    """A user who signed up, and their welcome email."""

    email = models.EmailField(unique=True)
    welcome_job = models.BigIntegerField(null=True)
    """The job that sends the welcome email."""
    welcomed_at = models.DateTimeField(null=True)
    """Set by that job's handler, in its ack's transaction."""
