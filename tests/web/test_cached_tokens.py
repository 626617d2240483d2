"""Tokens kept in Django's cache framework (fleet.cached_tokens): a read or a collector's report
does not go to the database for its token, and a revoked token, a deactivated or deleted user
is still refused at once, also when the revocation commits while another request is reading
the row."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import collector_client_for, count_cache_calls, keep_tasks_here, report
from topoweb.fleet import cached_tokens
from topoweb.fleet.access import create_api_token, revoke_collector_token
from topoweb.fleet.models import ApiToken, AuditEvent, CollectorToken
from topoweb.fleet.selectors import active_api_token, active_collector_token

LIST = "/api/v1/servers/"


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.mark.django_db
def test_a_token_seen_before_costs_no_query(django_assert_max_num_queries: Any) -> None:
    client = bearer(create_api_token("sched"))
    with django_assert_max_num_queries(9) as first:  # read, kept, and its use marked
        assert client.get(LIST).status_code == 200
    with django_assert_max_num_queries(9) as kept:  # the mark did not drop the copy
        assert client.get(LIST).status_code == 200

    def token_reads(captured: Any) -> int:
        return sum(
            q["sql"].startswith("SELECT") and "fleet_apitoken" in q["sql"]
            for q in captured.captured_queries
        )

    assert (token_reads(first), token_reads(kept)) == (1, 0)


@pytest.mark.django_db
def test_a_kept_token_is_still_marked_used_once_a_minute() -> None:
    secret = create_api_token("sched")
    client = bearer(secret)
    assert client.get(LIST).status_code == 200
    assert client.get(LIST).status_code == 200  # from the cache: not marked again
    marked = ApiToken.objects.get().last_used_at
    assert marked is not None
    assert AuditEvent.objects.filter(kind="token_used").count() == 1

    # A minute later (the gate's key expired): the kept copy's old mark says so; marked again.
    ApiToken.objects.update(last_used_at=marked - timedelta(minutes=2))  # the kept copy's
    cached_tokens.forget(ApiToken, [cached_tokens.prefix_of(secret)])
    assert client.get(LIST).status_code == 200  # read again, with the old mark, and kept
    cache.delete(f"api-token:marked:{cached_tokens.prefix_of(secret)}")
    assert client.get(LIST).status_code == 200
    assert AuditEvent.objects.filter(kind="token_used").count() == 2
    again = ApiToken.objects.get().last_used_at
    assert again is not None and again > marked


@pytest.mark.django_db(transaction=True)
def test_a_token_revoked_or_its_user_deactivated_or_deleted_is_refused_at_once() -> None:
    """Committed changes, as the admin makes them (transaction=True: after-commit runs)."""
    client = bearer(create_api_token("sched"))
    assert client.get(LIST).status_code == 200
    assert client.get(LIST).status_code == 200
    user = get_user_model().objects.get(username="sched")

    user.is_active = False
    user.save()
    assert client.get(LIST).status_code == 401
    user.is_active = True
    user.save()
    assert client.get(LIST).status_code == 200

    token = ApiToken.objects.get()
    token.revoked = True
    token.save()
    assert client.get(LIST).status_code == 401

    other = bearer(create_api_token("sched2"))
    assert other.get(LIST).status_code == 200
    get_user_model().objects.get(username="sched2").delete()
    assert other.get(LIST).status_code == 401


@pytest.mark.django_db
def test_a_copy_read_while_a_revocation_commits_is_never_used() -> None:
    """The request read the row before the revocation committed and stores its copy after the
    revocation forgot the token: the copy carries the old stamp and the next lookup reads
    the database."""
    key = create_api_token("sched")
    token = ApiToken.objects.select_related("user").get()

    def read_then_revoked() -> ApiToken | None:
        cached_tokens.forget(ApiToken, [token.prefix])  # the revocation commits during this read
        return token

    assert cached_tokens.active_token(ApiToken, key, read_then_revoked) is token
    reads: list[int] = []

    def read_revoked() -> ApiToken | None:
        reads.append(1)
        return None

    assert cached_tokens.active_token(ApiToken, key, read_revoked) is None
    assert reads == [1]


@pytest.mark.django_db
def test_a_kept_copy_is_used_while_nothing_changed() -> None:
    key = create_api_token("sched")
    token = ApiToken.objects.select_related("user").get()
    assert cached_tokens.active_token(ApiToken, key, lambda: token) is token
    kept = cached_tokens.active_token(ApiToken, key, lambda: None)  # not read: the copy holds
    assert kept is not None and kept.pk == token.pk and kept.user.username == "sched"


@pytest.mark.django_db
def test_a_cache_that_is_down_costs_the_database_read_only() -> None:
    secret = create_api_token("sched")
    nothing_listens = "redis://127.0.0.1:1/0"
    with override_settings(
        CACHES={
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": nothing_listens,
                "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
            }
        }
    ):
        found = cached_tokens.active_token(
            ApiToken, secret, lambda: ApiToken.objects.select_related("user").get()
        )
    assert found is not None and found.user.username == "sched"


@pytest.mark.django_db
def test_a_read_with_a_kept_token_marked_lately_makes_one_trip_to_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The token, its stamp and its last mark in one get_many; nothing else of the token on a
    list read."""
    client = bearer(create_api_token("sched"))
    assert client.get(LIST).status_code == 200  # read, kept and marked
    # The kept copy's mark is old: only the gate's time says it was marked just now.
    ApiToken.objects.update(last_used_at=timezone.now() - timedelta(minutes=5))
    cached_tokens.forget(ApiToken, [ApiToken.objects.get().prefix])
    assert client.get(LIST).status_code == 200  # read again with the old mark, and kept
    trips = count_cache_calls(monkeypatch)
    assert client.get(LIST).status_code == 200
    # The token's row, stamp and mark in one; then the fleet's version (config.answers).
    assert trips == ["get_many", "get"]
    assert AuditEvent.objects.filter(kind="token_used").count() == 1


REPORTS = "/api/v1/reports/"


@pytest.mark.django_db
def test_a_collectors_token_seen_before_costs_no_query_and_is_marked_once_a_minute(
    django_assert_max_num_queries: Any,
) -> None:
    client = collector_client_for("gpu-a01")
    with django_assert_max_num_queries(40) as first:  # read, kept, used; the report stored
        assert client.post(REPORTS, report("gpu-a01"), format="json").status_code == 201
    with django_assert_max_num_queries(1) as again:  # the duplicate's one statement
        assert client.post(REPORTS, report("gpu-a01"), format="json").status_code == 200

    def token_reads(captured: Any) -> int:
        return sum(
            q["sql"].startswith("SELECT") and "fleet_collectortoken" in q["sql"]
            for q in captured.captured_queries
        )

    assert (token_reads(first), token_reads(again)) == (1, 0)
    # Marked (and audited) by the first report only: the copy's mark is the gate's.
    assert "fleet_collectortoken" not in again.captured_queries[0]["sql"]
    assert CollectorToken.objects.get().last_used_at is not None
    assert AuditEvent.objects.filter(kind="token_used").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_collector_token_revoked_or_deleted_is_refused_at_once() -> None:
    """Committed changes, as the admin and `revoke_collector_token` make them."""
    client = collector_client_for("gpu-a01")
    body = report("gpu-a01")
    assert client.post(REPORTS, body, format="json").status_code == 201
    assert client.post(REPORTS, body, format="json").status_code == 200  # from the copy

    revoke_collector_token(CollectorToken.objects.get())
    assert client.post(REPORTS, body, format="json").status_code == 401

    other = collector_client_for("gpu-a01")
    assert other.post(REPORTS, body, format="json").status_code == 200
    CollectorToken.objects.get(revoked=False).delete()
    assert other.post(REPORTS, body, format="json").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_on_productions_cache_a_kept_collector_token_is_read_once_and_refused_once_revoked(
    django_assert_max_num_queries: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through django-redis on the real Redis, as production configures the cache
    (the rest of the suite keeps it in process)."""
    shared = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": settings.REDIS_URL,
        "KEY_PREFIX": f"topoweb-token-test-{uuid.uuid4().hex[:8]}",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
    }
    keep_tasks_here(monkeypatch)  # committed for real: the session's worker must not run them
    with override_settings(CACHES={**settings.CACHES, "default": shared}):
        client = collector_client_for("gpu-a01")
        body = report("gpu-a01")
        with django_assert_max_num_queries(40) as first:
            assert client.post(REPORTS, body, format="json").status_code == 201
        with django_assert_max_num_queries(1) as again:
            assert client.post(REPORTS, body, format="json").status_code == 200
        assert "fleet_collectortoken" in " ".join(q["sql"] for q in first.captured_queries)
        assert "fleet_collectortoken" not in again.captured_queries[0]["sql"]
        revoke_collector_token(CollectorToken.objects.get())
        assert client.post(REPORTS, body, format="json").status_code == 401
        cache.delete_pattern("*")  # this test's prefix only (clear() would empty the broker's db)


# --- what this layer takes from djangorestframework-api-key -----------------------------------
# The cache keeps rows by the package's prefix and verifies every presented key with the
# package's own `AbstractAPIKey.is_valid`; the database read is its manager's `get_from_key`.
# These fail if the package's key format, lookup or verification moves under us.


def _wrong_secret(key: str) -> str:
    prefix, _, secret = key.partition(".")
    return f"{prefix}.{secret[::-1]}"


@pytest.mark.django_db
def test_a_key_made_by_the_packages_manager_is_found_and_verified_through_our_path(
    django_user_model: Any,
) -> None:
    user = django_user_model.objects.create(username="sched")
    api, api_key = ApiToken.objects.create_key(user=user, name="sched")
    collector, collector_key = CollectorToken.objects.create_key(hostname="gpu-a01", name="a01")

    assert cached_tokens.prefix_of(api_key) == api.prefix
    for _ in range(2):  # read from the database and kept, then from the kept copy
        found = active_api_token(api_key, mark=False)
        assert found is not None and found.pk == api.pk and found.user.username == "sched"
        found_collector = active_collector_token(collector_key, mark=False)
        assert found_collector is not None and found_collector.hostname == "gpu-a01"
    assert bearer(api_key).get(LIST).status_code == 200


@pytest.mark.django_db
def test_a_wrong_secret_with_the_right_prefix_is_refused_read_or_kept(
    django_assert_max_num_queries: Any,
) -> None:
    key = create_api_token("sched")
    wrong = _wrong_secret(key)
    assert ApiToken.objects.is_valid(key) and not ApiToken.objects.is_valid(wrong)

    assert active_api_token(wrong, mark=False) is None  # not kept: read and refused
    assert active_api_token(key, mark=False) is not None  # read and kept
    with django_assert_max_num_queries(0):
        assert active_api_token(wrong, mark=False) is None  # the kept copy refuses it
    assert bearer(wrong).get(LIST).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_an_expired_token_is_refused_at_once_kept_or_not(
    django_assert_max_num_queries: Any,
) -> None:
    key = create_api_token("sched")
    client = bearer(key)
    token = ApiToken.objects.get()
    token.expiry_date = timezone.now() + timedelta(seconds=1)
    token.save()  # as the admin saves it
    assert client.get(LIST).status_code == 200  # read and kept, with its expiry
    time.sleep(1.1)
    with django_assert_max_num_queries(0):  # the kept copy says it expired
        assert active_api_token(key, mark=False) is None
    assert client.get(LIST).status_code == 401

    other = create_api_token("sched2")
    token = ApiToken.objects.get(user__username="sched2")
    token.expiry_date = timezone.now() - timedelta(seconds=1)
    token.save()
    assert bearer(other).get(LIST).status_code == 401
