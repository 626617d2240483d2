"""The one read rule, for pages and API alike, and the DRF permissions that apply it.

Kept apart from config.api: DRF imports DEFAULT_PERMISSION_CLASSES while rest_framework.views
loads, so this module must not import rest_framework.views itself."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework import permissions
from rest_framework.request import Request


def may_read(user: AbstractBaseUser | AnonymousUser) -> bool:
    """The one read rule, for pages and API alike: signed-in users read, and anyone does when
    TOPOWEB_PUBLIC_READ is on (read at request time, so a settings change applies at once)."""
    return bool(settings.TOPOWEB_PUBLIC_READ or user.is_authenticated)


class CanRead(permissions.BasePermission):
    """GET/HEAD/OPTIONS under the read rule: the API's default permission."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in permissions.SAFE_METHODS and may_read(request.user)


class CanQuery(permissions.BasePermission):
    """Questions sent as POST bodies (costs, placement) under the read rule: they write nothing."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return may_read(request.user)
