"""schemathesis against the served OpenAPI schema: no 5xx anywhere, and every response matches
what the schema says (status codes, content types, bodies, the error shape)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis import checks

from topoweb.config.wsgi import application

# Negative data is still sent (and must not cause a 5xx), but DRF's tolerance of junk in
# optional parameters such as `page_size` is by design, so acceptance of it is not a failure.
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


@pytest.fixture(scope="module")
def keep_test_connection() -> Iterator[None]:
    """Direct WSGI calls would close the test transaction's connection, as the test client
    avoids doing; do the same here."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(db: None) -> str:
    from django.core.cache import cache
    from django.utils import timezone

    from tests.web.conftest import fixture_text
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import create_api_token, ingest_report

    cache.clear()  # the ingest throttle counts per token across examples
    ingest_report(
        hostname="gpu-a01",
        topo_text=fixture_text("topo_01_h200-8gpu-12nic-numaid.txt"),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        host={"product_name": "HGX H200"},
    )
    return create_api_token("schemathesis")


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_the_api_answers_as_its_schema_says(
    case: Any, token: str, keep_test_connection: None
) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
