from __future__ import annotations

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from postkit.contrib import django as postkit_django
from signups.models import Signup


@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    """Queue the welcome and save the user, in one ``atomic()`` block: both commit, or
    neither does. The job is pushed first, so that the row records its id: a duplicate email
    rolls back the job too."""
    email = request.POST["email"]
    try:
        with transaction.atomic():
            job_id = postkit_django.queue().push("send_welcome", {"email": email})
            user = Signup.objects.create(email=email, welcome_job=job_id)
    except IntegrityError:
        return JsonResponse({"error": f"{email} has already signed up"}, status=409)
    return JsonResponse({"user_id": user.id, "welcome_job": job_id}, status=202)


@require_GET
def user(request: HttpRequest, user_id: int) -> JsonResponse:
    """The user, and when their welcome was sent (null until the worker has sent it)."""
    user = get_object_or_404(Signup, id=user_id)
    welcomed_at = user.welcomed_at and user.welcomed_at.isoformat()
    return JsonResponse({"email": user.email, "welcomed_at": welcomed_at})
