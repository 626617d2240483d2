"""DRF authentication and permissions by Bearer token: collector tokens (write one host's
reports) and API tokens (read as a user; upload too when made with the upload scope), both
djangorestframework-api-key keys, looked up and verified on every request by the package's
manager (through the cache, fleet.cached_tokens; a revoked or expired token is refused at
once), and the upload rule. The read rule itself is config.permissions.may_read."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from topoweb.fleet import access, cached_tokens, selectors
from topoweb.fleet.models import ApiToken, CollectorToken

UPLOAD_PERMISSION = "fleet.upload_files"

log = logging.getLogger(__name__)


def _bearer(request: Request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is no header."""
    header = authentication.get_authorization_header(request).decode("latin-1")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token or " " in token:
        raise exceptions.AuthenticationFailed("Malformed Bearer token.")
    return token


def _first_mark(token: CollectorToken | ApiToken, now: datetime) -> bool:
    """Whether this request marks the token used (once a minute, whichever worker serves it:
    a token may come from the cache, its `last_used_at` then no later than its last mark)."""
    seconds = selectors.LAST_USED_RESOLUTION.total_seconds()
    return cached_tokens.first_mark(type(token), token.prefix, seconds, now)


class CollectorTokenAuthentication(authentication.BaseAuthentication):
    """`request.auth` becomes the CollectorToken; the user stays anonymous. The token is not
    marked used here: the report's first statement does it (a host reporting every few minutes
    would pay a write of its own per report), and the report endpoint for a request refused
    before that statement."""

    def authenticate(self, request: Request) -> tuple[Any, CollectorToken] | None:
        token = _bearer(request)
        if token is None:
            return None
        found = selectors.active_collector_token(token, mark=False)
        if found is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked collector token.")
        now = timezone.now()
        if selectors.needs_mark(found, now):  # ingest marks it; audited as often
            if _first_mark(found, now):
                found.unrecorded_use = access.token_use(request, found)  # written with the mark
            else:  # another worker marks it: this request's copy must not mark it again
                found.last_used_at = now
        return AnonymousUser(), found

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="topoweb"'


class ApiTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = _bearer(request)
        if token is None:
            return None
        found = selectors.active_api_token(token, mark=False)
        if found is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API token.")
        # At most once a minute per token, whichever worker serves it (the token may come
        # from the cache: its last_used_at is then the later of the copy's and the last
        # mark's, read in the same round trip).
        now = timezone.now()
        if selectors.needs_mark(found, now) and _first_mark(found, now):
            access.token_used(request, found)
            selectors.mark_used(found)
        return found.user, found

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="topoweb"'


class HasCollectorToken(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, CollectorToken)


class CanUpload(permissions.BasePermission):
    """Uploads write a host's current topology: an API token needs the upload scope, a signed-in
    person the fleet.upload_files permission (staff grant it in the admin; superusers have it).
    Anonymous callers get 401, the others 403 saying what is missing."""

    message = "Uploading needs an API token with the upload scope or the upload permission."

    def has_permission(self, request: Request, view: Any) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        if isinstance(request.auth, ApiToken):
            if request.auth.scope != ApiToken.Scope.UPLOAD:
                self.message = (
                    "This API token reads only; create one with "
                    "`manage.py create_api_token USER --scope upload` to upload."
                )
                return False
            return True
        if request.user.has_perm(UPLOAD_PERMISSION):
            return True
        self.message = f"Uploading needs the {UPLOAD_PERMISSION} permission; ask staff to grant it."
        return False


class _BearerScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "topoweb.fleet.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (`manage.py create_api_token USER`): reads the API and "
            "asks questions. Uploads need one made with `--scope upload`.",
        }


class _CollectorScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "topoweb.fleet.authentication.CollectorTokenAuthentication"
    name = "collectorToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A collector token (`manage.py create_collector_token HOST`): "
            "writes reports for that one host, and nothing else.",
        }
