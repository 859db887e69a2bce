"""The request type of every view that reads `request.htmx` (set by django-htmx's middleware)."""

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


class SignedInHtmxRequest(HtmxHttpRequest):
    """The request of a `login_required` view: its user is a signed-in User, never AnonymousUser."""

    user: User
