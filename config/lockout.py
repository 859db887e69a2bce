"""The login page when django-axes has locked a username at an address: it says so and for how long."""

import math

from axes.helpers import get_client_ip_address, get_cool_off
from axes.models import AccessAttempt
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


def login_locked(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict | None = None
) -> HttpResponse:
    """axes' AXES_LOCKOUT_CALLABLE: the login page (429) with the minutes left until the lock lapses."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    cool_off = get_cool_off(request)
    assert cool_off is not None, "settings.AXES_COOLOFF_TIME is always set"
    last = (
        AccessAttempt.objects.filter(username=username, ip_address=get_client_ip_address(request))
        .order_by("-attempt_time")
        .values_list("attempt_time", flat=True)
        .first()
    )
    left = (last + cool_off - timezone.now()) if last else cool_off
    context = {
        "form": AuthenticationForm(request, initial={"username": username}),
        "locked_minutes": max(1, math.ceil(left.total_seconds() / 60)),
        "next": request.POST.get("next", ""),
    }
    return render(request, "registration/login.html", context, status=429)
