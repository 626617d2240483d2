"""Tokens kept in Django's cache framework (Redis in production, shared by every worker), so
that a request does not go to PostgreSQL for its token: API tokens (with their users) and
collector tokens alike. A revoked token or a deactivated user is still refused at once.

A kept copy is keyed by the token's prefix (unique per kind, and known to a save or delete,
which never sees the secret), and the presented key is verified against it on every request
with the package's own `AbstractAPIKey.is_valid`: a wrong secret with a right prefix is refused.

Each kept token is stored with the stamp its token's stamp key held when the row was read. A
save or delete of the token (or of an API token's user) gives the stamp key a new value after
the transaction commits (and drops the kept copy). A lookup takes both keys in one round trip and
uses the copy only when the stamps match: a request that read the row just before a
revocation committed may still store its copy, but that copy carries the old stamp and is
never used. Only `Model.save()` and `delete()` are seen (the admin, services, signals):
`QuerySet.update()` sends no signal, so nothing revokes a token or deactivates a user that way.

Unknown tokens are not kept: a token made later has a prefix nobody asked for before.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from rest_framework_api_key.crypto import split

from topoweb.fleet.models import ApiToken, CollectorToken

log = logging.getLogger(__name__)

Token = ApiToken | CollectorToken
T = TypeVar("T", ApiToken, CollectorToken)

# A kept copy expires anyway after this many seconds: revocation does not wait for it (the
# stamp does that), it only bounds what a cache holds for tokens no longer used.
KEEP_FOR_S = 600

# Each kind's keys apart: the two tables' prefixes may meet.
_KIND: dict[type[Token], str] = {ApiToken: "api-token", CollectorToken: "collector-token"}


def _keys(kind: type[Token], prefix: str) -> tuple[str, str]:
    return f"{_KIND[kind]}:stamp:{prefix}", f"{_KIND[kind]}:row:{prefix}"


def _mark_key(kind: type[Token], prefix: str) -> str:
    return f"{_KIND[kind]}:marked:{prefix}"


def prefix_of(key: str) -> str:
    """The prefix a key is looked up by, as the package's `get_from_key` splits it."""
    return split(key)[0]


def active_token(kind: type[T], key: str, read: Callable[[], T | None]) -> T | None:
    """The token of this kind that `key` opens (an API token with its user): the copy kept in
    the cache when its stamp still holds and the key verifies against it, else `read()` from
    the database (which verifies the key) and kept. A cache that cannot be reached costs only
    the database read. The time of the token's last mark (first_mark), read in the same round
    trip, is its `last_used_at` when later than the copy's: a copy kept before the mark still
    says it is not due for another (selectors.needs_mark)."""
    prefix = prefix_of(key)
    stamp_key, row_key = _keys(kind, prefix)
    mark_key = _mark_key(kind, prefix)
    try:
        got = cache.get_many([stamp_key, row_key, mark_key])
    except Exception:  # a cache that is down must not refuse tokens
        log.warning("token cache unreachable; reading the token from the database", exc_info=True)
        return read()
    stamp = got.get(stamp_key)
    kept = got.get(row_key)
    if kept is not None and kept[0] == stamp and isinstance(kept[1], kind):
        return _marked(kept[1], got.get(mark_key)) if kept[1].is_valid(key) else None
    found = read()
    if found is not None:
        try:
            cache.set(row_key, (stamp, found), KEEP_FOR_S)
        except Exception:
            log.warning("token cache unreachable; token not kept", exc_info=True)
    return _marked(found, got.get(mark_key))


def _marked(token: T | None, marked_at: Any) -> T | None:
    if (
        token is not None
        and isinstance(marked_at, datetime)
        and (token.last_used_at is None or marked_at > token.last_used_at)
    ):
        token.last_used_at = marked_at  # this request's own copy (unpickled, or read now)
    return token


def forget(kind: type[Token], prefixes: Iterable[str]) -> None:
    """New stamps for the tokens of these prefixes (copies kept before are never used again),
    now."""
    stamps: dict[str, Any] = {}
    rows: list[str] = []
    for prefix in prefixes:
        stamp_key, row_key = _keys(kind, prefix)
        stamps[stamp_key] = uuid.uuid4().hex
        rows.append(row_key)
    if not stamps:
        return
    # The stamp outlives any copy (no timeout): were it evicted, a lookup would read None,
    # which matches no stamp a copy carries after a revocation.
    cache.set_many(stamps, timeout=None)
    cache.delete_many(rows)


def forget_after_commit(kind: type[Token], prefixes: Iterable[str]) -> None:
    """`forget` once the transaction that changed the rows commits (at once outside one): a
    lookup before the commit still reads the old row, and its copy gets a stamp the commit
    replaces. Inside a transaction the copies go at once too, so that the transaction itself
    (a test's, a migration's) already sees the change."""
    chosen = list(prefixes)
    if not chosen:
        return
    if not transaction.get_autocommit():
        forget(kind, chosen)
    transaction.on_commit(lambda: forget(kind, chosen))


def first_mark(kind: type[Token], prefix: str, seconds: float, now: datetime) -> bool:
    """Whether this request is the first to mark the token used in `seconds`, across every
    worker (the kept copy's `last_used_at` is not refreshed by a mark: the mark's time, kept
    for `seconds`, is read with the token instead). A cache that cannot be reached lets the
    request mark it."""
    try:
        return bool(cache.add(_mark_key(kind, prefix), now, seconds))
    except Exception:
        log.warning("token cache unreachable; marking the token used", exc_info=True)
        return True


def _token_changed(sender: type[Token], instance: Token, **kwargs: Any) -> None:
    if kwargs.get("update_fields") == frozenset({"last_used_at"}):
        return  # a mark changes nothing a request is let in by
    forget_after_commit(sender, [instance.prefix])


def _user_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    # A user deleted takes its tokens along, each sending its own post_delete.
    forget_after_commit(
        ApiToken,
        ApiToken.objects.filter(user_id=instance.pk).values_list("prefix", flat=True),
    )


def connect() -> None:
    """Forget a token whenever it (or an API token's user) is saved or deleted (called by
    FleetConfig)."""
    for kind in (ApiToken, CollectorToken):
        name = _KIND[kind]
        post_save.connect(_token_changed, sender=kind, dispatch_uid=f"cached_tokens.{name}_saved")
        post_delete.connect(_token_changed, sender=kind, dispatch_uid=f"cached_tokens.{name}_gone")
    user_model = get_user_model()
    post_save.connect(_user_changed, sender=user_model, dispatch_uid="cached_tokens.user_saved")
