"""schemathesis against the served OpenAPI schema: no 5xx anywhere, and every response matches
what the schema says (status codes, content types, bodies, the error shape)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import override_settings
from django.utils import timezone
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
# The schema is read like the API; loaded here, before any test has a token to read it with.
with override_settings(TOPOWEB_PUBLIC_READ=True):
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
    from topoweb.fleet.access import create_api_token
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

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


@pytest.mark.django_db
def test_the_richest_documents_match_their_schema_once_computed(keep_test_connection: None) -> None:
    """Generated examples rarely name a real server; these are the documents the pages read,
    computed for real (analysis, health, acceptance) and checked against the schema."""
    from tests.web.conftest import fixture_text
    from topoweb.analysis import services as analysis_services
    from topoweb.analysis.models import Analysis
    from topoweb.fleet.access import create_api_token
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import BenchmarkInput, ingest_report
    from topoweb.health.services import evaluate_server

    done = ingest_report(
        hostname="a100-01",
        topo_text=fixture_text("topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        host={"product_name": "DGX A100"},
        benchmarks=[
            BenchmarkInput(
                "nccl-tests",
                fixture_text("nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"),
            )
        ],
    )
    analysis = Analysis.objects.get()
    assert analysis_services.run_analysis(analysis.pk) == "done"
    assert evaluate_server(done.server.pk) is not None
    fingerprint = analysis.topology_class.fingerprint
    headers = {"Authorization": f"Bearer {create_api_token('pages')}"}

    for path, parameters in [
        ("/api/v1/servers/{hostname}/", {"hostname": "a100-01"}),
        ("/api/v1/servers/{hostname}/cost-tables/", {"hostname": "a100-01"}),
        ("/api/v1/servers/{hostname}/acceptance/", {"hostname": "a100-01"}),
        ("/api/v1/skus/{sku_name}/acceptance/", {"sku_name": "DGX A100"}),
        ("/api/v1/topology-classes/{fingerprint}/", {"fingerprint": fingerprint}),
    ]:
        operation = schema[path]["GET"]
        response = operation.Case(path_parameters=parameters).call(headers=headers)
        assert response.status_code == 200, (path, response.text)
        operation.validate_response(response)
