"""Who may write, and the record of who did: tokens made and revoked, the audit trail (uploads,
tokens made and used, sign-ins; who, when, from where) and collector enrollment (the fleet's
one secret traded for a host's own token on first contact).

Events are written where the request is known: the API's authentication (a token's use, at
most once a minute per token, as its last-use mark), the upload view, Django's sign-in signals
(local accounts and OpenID Connect alike); a token's creation by a receiver, with the actor of
the request that made it (AuditContextMiddleware), else "system" (a management command)."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models.signals import post_save
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from rest_framework.request import Request

from topoweb.fleet import statements
from topoweb.fleet.models import ApiToken, AuditEvent, CollectorToken

# --- tokens ---------------------------------------------------------------------------------


def create_collector_token(hostname: str) -> str:
    """A new token for one host's collector; the plain text exists only in the return value."""
    _, key = CollectorToken.objects.create_key(hostname=hostname, name=hostname[:50])
    return key


def revoke_collector_token(token: CollectorToken) -> None:
    token.revoked = True
    token.save(update_fields=["revoked"])


def create_api_token(username: str, scope: str = ApiToken.Scope.READ) -> str:
    """A new API token for the user, created (without a usable password) if it does not exist.
    Read only unless `scope` is "upload"."""
    if scope not in ApiToken.Scope.values:
        raise ValueError(f"unknown scope {scope!r}; expected one of {ApiToken.Scope.values}")
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    _, key = ApiToken.objects.create_key(user=user, scope=scope, name=username[:50])
    return key


# --- the audit trail --------------------------------------------------------------------------

# A Django request, or DRF's wrapping one (it passes META and headers through).
AnyRequest = HttpRequest | Request

# The (actor, user, address, forwarded-for) of the request being served, for the receivers:
# worked out only when one records an event (rarely), since reading a request's user asks the
# session store for it, which an API request otherwise never does.
_Context = Callable[[], tuple[str, Any, str | None, str]]
_current: contextvars.ContextVar[_Context | None] = contextvars.ContextVar(
    "topoweb_audit_request", default=None
)


def _peer(request: AnyRequest) -> tuple[str | None, str]:
    return request.META.get("REMOTE_ADDR") or None, request.headers.get("X-Forwarded-For", "")


def _actor(user: Any) -> tuple[str, Any]:
    if user is None or isinstance(user, AnonymousUser) or not user.is_authenticated:
        return "anonymous", None
    return str(user.get_username()), user


def _event(
    kind: str,
    *,
    actor: str,
    user: Any = None,
    address: str | None = None,
    forwarded_for: str = "",
    subject: str = "",
    **detail: Any,
) -> AuditEvent:
    if forwarded_for:
        detail["forwarded_for"] = forwarded_for[:300]
    return AuditEvent(
        at=timezone.now(),
        kind=kind,
        actor=actor[:300],
        user=user,
        address=address,
        subject=subject[:300],
        detail=detail,
    )


def record(kind: str, **fields: Any) -> AuditEvent:
    """Write an event of `kind` (its fields as `_event` takes them) to the audit trail."""
    event = _event(kind, **fields)
    # Written out (fleet.statements): a token's once-a-minute mark records one.
    statements.insert_row(event)
    return event


def record_request(kind: str, request: AnyRequest, *, actor: str = "", **fields: Any) -> None:
    """An event of `request`: its user (or `actor`), its peer's address."""
    name, user = _actor(getattr(request, "user", None))
    address, forwarded = _peer(request)
    record(kind, actor=actor or name, user=user, address=address, forwarded_for=forwarded,
           **fields)  # fmt: skip


def token_use(request: AnyRequest, token: CollectorToken | ApiToken) -> AuditEvent:
    """The audit event of this request's use of `token`, not yet written."""
    if isinstance(token, CollectorToken):
        actor, user, detail = f"collector {token.hostname}", None, {"token": "collector"}
    else:
        actor, user, detail = token.user.get_username(), token.user, {"token": "api"}
    address, forwarded = _peer(request)
    return _event(AuditEvent.Kind.TOKEN_USED, actor=actor, user=user, address=address,
                  forwarded_for=forwarded, subject=token.prefix, path=request.path[:200],
                  **detail)  # fmt: skip


def token_used(request: AnyRequest, token: CollectorToken | ApiToken) -> None:
    statements.insert_row(token_use(request, token))


def record_use(token: CollectorToken) -> None:
    """Write the audit event of the collector token's use that its report's first statement
    did not (the report was refused before it; SQLite, which has no such statement)."""
    if token.unrecorded_use is not None:
        statements.insert_row(token.unrecorded_use)
        token.unrecorded_use = None


def _token_created(sender: type, instance: CollectorToken | ApiToken, created: bool,
                   **_: Any) -> None:  # fmt: skip
    if not created:
        return
    context = _current.get()
    actor, user, address, forwarded = context() if context else ("system", None, None, "")
    detail: dict[str, Any]
    if isinstance(instance, CollectorToken):
        detail = {"token": "collector", "hostname": instance.hostname}
    else:
        detail = {"token": "api", "for": instance.user.get_username(), "scope": instance.scope}
    record(AuditEvent.Kind.TOKEN_CREATED, actor=actor, user=user, address=address,
           forwarded_for=forwarded, subject=instance.prefix, **detail)  # fmt: skip


def _signed_in(sender: Any, request: HttpRequest | None, user: AbstractBaseUser,
               **_: Any) -> None:  # fmt: skip
    address, forwarded = _peer(request) if request is not None else (None, "")
    backend = getattr(user, "backend", "")
    record(AuditEvent.Kind.SIGN_IN, actor=user.get_username(), user=user, address=address,
           forwarded_for=forwarded, backend=backend)  # fmt: skip


def _sign_in_failed(sender: Any, credentials: dict[str, Any],
                    request: HttpRequest | None = None, **_: Any) -> None:  # fmt: skip
    address, forwarded = _peer(request) if request is not None else (None, "")
    record(AuditEvent.Kind.SIGN_IN_FAILED, actor=str(credentials.get("username", ""))[:150],
           address=address, forwarded_for=forwarded)  # fmt: skip


def connect() -> None:
    """Called once by FleetConfig.ready."""
    from django.contrib.auth.signals import user_logged_in, user_login_failed

    post_save.connect(_token_created, sender=CollectorToken, dispatch_uid="audit-ctoken")
    post_save.connect(_token_created, sender=ApiToken, dispatch_uid="audit-apitoken")
    user_logged_in.connect(_signed_in, dispatch_uid="audit-sign-in")
    user_login_failed.connect(_sign_in_failed, dispatch_uid="audit-sign-in-failed")


class AuditContextMiddleware:
    """Keeps the request's actor and address where the token receiver finds them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        reset = _current.set(lambda: (*_actor(getattr(request, "user", None)), *_peer(request)))
        try:
            return self.get_response(request)
        finally:
            _current.reset(reset)


def enroll_collector(request: AnyRequest, hostname: str) -> str | None:
    """A collector token for a host on its first contact (the caller checked the fleet's
    enrollment secret); None when the host already holds a live (unrevoked, unexpired) token:
    a second enrollment would let whoever has the secret write as an enrolled host, so staff
    revoke the old token in the admin first."""
    reset = _current.set(lambda: ("enrollment", None, *_peer(request)))
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":  # two first contacts at once: one token
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"host:{hostname}"]
                    )
            live = CollectorToken.objects.get_usable_keys().filter(hostname=hostname)
            if live.exclude(expiry_date__lte=timezone.now()).exists():
                return None
            return create_collector_token(hostname)
    finally:
        _current.reset(reset)


def export_lines(since: datetime | None = None, kind: str = "") -> Iterator[bytes]:
    """The trail as JSON lines, oldest first (streamed: a year of events is not held)."""
    events = AuditEvent.objects.order_by("at", "id")
    if since is not None:
        events = events.filter(at__gte=since)
    if kind:
        events = events.filter(kind=kind)
    for event in events.iterator(chunk_size=2000):
        yield json.dumps(event.to_document(), separators=(",", ":")).encode() + b"\n"
