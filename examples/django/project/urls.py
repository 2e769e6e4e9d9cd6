from __future__ import annotations

from django.urls import path

from signups import views

urlpatterns = [
    path("signup", views.signup),
    path("users/<int:user_id>", views.user),
]
