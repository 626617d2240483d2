"""DRF authentication and permissions by Bearer token: collector tokens (write one host's
reports) and API tokens (read as a user; upload too when made with the upload scope), the
tokens each process keeps while no change could have refused them, and the upload rule. The
read rule itself is config.permissions.may_read."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from topoweb.config.throttles import counted_ahead, renew_stamp
from topoweb.fleet import selectors
from topoweb.fleet.models import ApiToken, CollectorToken

UPLOAD_PERMISSION = "fleet.upload_files"

log = logging.getLogger(__name__)

T = TypeVar("T", CollectorToken, ApiToken)


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


# The cache key whose value changes (to a fresh random one) after every commit that could
# refuse a token found before it: see _tokens_changed.
TOKENS_STAMP = "fleet-tokens-stamp"


@dataclass(frozen=True)
class _Kept:
    token: CollectorToken | ApiToken | None  # None: no active token has this digest
    user: Any  # an API token's user as looked up, copied for each request
    stamp: str  # TOKENS_STAMP's value read before the token was looked up
    at: float  # time.monotonic() of the lookup


class KeptTokens:
    """The tokens this process has looked up, by digest, each valid only while TOKENS_STAMP
    in Redis keeps the value read before the lookup: every change that could refuse a token
    renews it after commit, so a revoked token or a deactivated user is refused by every
    process on its next request. Reading the stamp is one Redis round trip, the one that also
    counts the endpoint's throttle (config.throttles.counted_ahead), instead of a token query.

    The kept token row is the one each request of this process gets, so its last_used_at is
    this process's record of the once-a-minute mark; an API token's user is built afresh per
    request (permission caches live on the user). Without Redis (the embedded default), or
    while Redis fails, every request looks its token up, as before; an entry older than
    KEPT_SECONDS is looked up again too, in case a renewal was lost to a Redis failure."""

    KEPT_SECONDS = 300.0
    SIZE = 10_000  # at most this many entries: a process holding more drops them all

    def __init__(self) -> None:
        self._kept: dict[tuple[type, str], _Kept] = {}

    def find(
        self, request: Request, kind: type[T], token: str, look_up: Callable[[str], T | None]
    ) -> T | None:
        key = (kind, selectors.hash_token(token))
        kept = self._kept.get(key)
        fresh = kept is not None and time.monotonic() - kept.at < self.KEPT_SECONDS
        try:
            # A kept token has its throttle counted in the same round trip (taken back when
            # the stamp has moved: a token found again has the same row and id).
            stamp = counted_ahead(request, TOKENS_STAMP, kept.token if fresh and kept else None)
        except Exception:
            log.warning("tokens looked up in the database: the cache is unreachable")
            self._kept.clear()  # a renewal may be lost meanwhile
            return look_up(token)
        if stamp is None:
            return look_up(token)
        if kept is not None and fresh and kept.stamp == stamp:
            if isinstance(kept.token, ApiToken):
                kept.token.user = copy.copy(kept.user)
            return kept.token  # type: ignore[return-value]
        found = look_up(token)
        if len(self._kept) >= self.SIZE:
            self._kept.clear()
        user = copy.copy(found.user) if isinstance(found, ApiToken) else None
        self._kept[key] = _Kept(found, user, stamp, time.monotonic())
        return found

    def clear(self) -> None:
        self._kept.clear()


_kept_tokens = KeptTokens()


def _api_token(token: str) -> ApiToken | None:
    return selectors.active_api_token(token, mark=False)


def _collector_token(token: str) -> CollectorToken | None:
    return selectors.active_collector_token(token, mark=False)


def _tokens_changed(sender: Any, **kwargs: Any) -> None:
    """After commit, renews TOKENS_STAMP: kept tokens are looked up again by every process.
    Connected to every save and delete of tokens and users (admin, services, cascades),
    except the marks of use and sign-ins, which refuse nobody; a bulk update() sends no
    signal, so whatever revokes tokens or deactivates users that way must call
    renew_tokens_stamp too."""
    update_fields = kwargs.get("update_fields")
    if update_fields is not None and set(update_fields) <= {"last_used_at", "last_login"}:
        return
    transaction.on_commit(renew_tokens_stamp, using=kwargs.get("using"))


def renew_tokens_stamp() -> None:
    """Every process looks its kept tokens up again (nothing without Redis)."""
    try:
        renew_stamp(TOKENS_STAMP)
    except Exception:
        # The change is committed; processes keep what they found for KEPT_SECONDS at most.
        log.exception(
            "tokens stamp not renewed: kept tokens stay valid up to %ss", KeptTokens.KEPT_SECONDS
        )


for _model in (CollectorToken, ApiToken, settings.AUTH_USER_MODEL):
    post_save.connect(_tokens_changed, sender=_model, dispatch_uid=f"tokens-stamp-save-{_model}")
    post_delete.connect(
        _tokens_changed, sender=_model, dispatch_uid=f"tokens-stamp-delete-{_model}"
    )


class CollectorTokenAuthentication(authentication.BaseAuthentication):
    """`request.auth` becomes the CollectorToken; the user stays anonymous. The token is not
    marked used here: the report's first statement does it (a host reporting every few minutes
    would pay a write of its own per report), and the report endpoint for a request refused
    before that statement."""

    def authenticate(self, request: Request) -> tuple[Any, CollectorToken] | None:
        token = _bearer(request)
        if token is None:
            return None
        found = _kept_tokens.find(request, CollectorToken, token, _collector_token)
        if found is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked collector token.")
        return AnonymousUser(), found

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="topoweb"'


class ApiTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = _bearer(request)
        if token is None:
            return None
        found = _kept_tokens.find(request, ApiToken, token, _api_token)
        if found is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API token.")
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
