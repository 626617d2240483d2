"""Tokens issued before djangorestframework-api-key (fleet migrations 0014-0016): a collector's
or a scheduler's old token still opens after the upgrade, a revoked one does not, and the
migrations go back as they came."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import keep_tasks_here, report
from topoweb.fleet.models import ApiToken, CollectorToken, Snapshot

BEFORE = [("fleet", "0013_snapshot_gpu_models")]


def _migrate(targets: list[tuple[str, str]] | None = None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(targets or executor.loader.graph.leaf_nodes())


@pytest.fixture
def before_the_package() -> Iterator[Any]:
    """The fleet's tables as they were before the package (its apps, to write rows with),
    migrated forward again whatever the test does."""
    _migrate(BEFORE)
    try:
        yield MigrationExecutor(connection).loader.project_state(BEFORE).apps
    finally:
        _migrate()


def _old_token(tag: str) -> tuple[str, dict[str, Any]]:
    """A token as fleet.access made them before: its plain text and the columns stored."""
    token = tag + secrets.token_urlsafe(32)
    return token, {"token_sha256": hashlib.sha256(token.encode()).hexdigest(), "prefix": token[:12]}


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def post(token: str, hostname: str) -> Any:
    return bearer(token).post("/api/v1/reports/", report(hostname), format="json")


@pytest.mark.django_db(transaction=True)
def test_old_tokens_still_open_after_the_migration_and_a_revoked_one_does_not(
    before_the_package: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    keep_tasks_here(monkeypatch)  # committed for real: the session's worker must not run them
    old = before_the_package
    collector, collector_row = _old_token("twc_")
    revoked, revoked_row = _old_token("twc_")
    scheduler, scheduler_row = _old_token("twa_")
    old_collectors = old.get_model("fleet", "CollectorToken").objects
    old_collectors.create(hostname="gpu-a01", **collector_row)
    old_collectors.create(hostname="gpu-a02", revoked_at=timezone.now(), **revoked_row)
    user = old.get_model("auth", "User").objects.create(username="sched")
    old.get_model("fleet", "ApiToken").objects.create(user=user, scope="upload", **scheduler_row)

    _migrate()

    carried = CollectorToken.objects.get(hostname="gpu-a01")
    assert carried.prefix == collector[4:12] and carried.hashed_key.startswith("sha256$$")
    assert CollectorToken.objects.get(hostname="gpu-a02").revoked
    assert ApiToken.objects.get().scope == ApiToken.Scope.UPLOAD
    assert post(collector, "gpu-a01").status_code == 201
    assert post(collector, "gpu-a02").status_code == 403  # its own host only, as before
    refused = post(revoked, "gpu-a02")
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "Unknown or revoked collector token."
    assert bearer(collector[:-1] + "x").get("/api/v1/servers/").status_code == 401
    assert bearer(scheduler).get("/api/v1/servers/").status_code == 200
    assert bearer(collector).get("/api/v1/servers/").status_code == 401  # not an API token
    assert Snapshot.objects.count() == 1
    # Not rehashed on use: the row still holds the digest it was carried over with.
    assert CollectorToken.objects.get(hostname="gpu-a01").hashed_key == carried.hashed_key


@pytest.mark.django_db(transaction=True)
def test_the_migrations_go_back_with_the_old_tokens_and_without_the_packages_keys(
    before_the_package: Any,
) -> None:
    old = before_the_package
    collector, collector_row = _old_token("twc_")
    old.get_model("fleet", "CollectorToken").objects.create(hostname="gpu-a01", **collector_row)
    _migrate()
    CollectorToken.objects.create_key(hostname="gpu-a02", name="gpu-a02")  # no SHA-256 of it

    _migrate(BEFORE)

    back = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    (row,) = back.get_model("fleet", "CollectorToken").objects.values(
        "hostname", "prefix", "token_sha256", "revoked_at"
    )
    assert row == {"hostname": "gpu-a01", "revoked_at": None, **collector_row}
