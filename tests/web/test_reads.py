"""The read paths: stored JSON served as stored, answers computed once per model, orjson,
duplicate reports found before any parsing; each sees every change that should change the
answer, in the queries it is allowed."""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer as DrfJSONRenderer
from rest_framework.test import APIClient

from tests.web.conftest import (
    H200,
    RTX6000,
    RTX6000_P2P,
    V100,
    V100_OTHER_MESH,
    add,
    count_cache_calls,
    fixture_text,
)
from topoweb.analysis import apis as analysis_apis
from topoweb.analysis import questions
from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis.models import Analysis
from topoweb.config.answers import KEPT_READ_S, fleet_changed
from topoweb.config.api import validated
from topoweb.config.renderers import JSONRenderer, raw_json
from topoweb.fleet.access import create_api_token
from topoweb.fleet.changes import servers_changed
from topoweb.fleet.models import ApiToken, Server, Snapshot
from topoweb.fleet.services import BenchmarkInput
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet() -> None:
    add("h200-01", H200, "HGX H200")
    add("v100-01", V100, "DGX-1V")
    add("v100-02", V100, "DGX-1V")
    add("v100-03", V100_OTHER_MESH, "DGX-1V")  # differs from its SKU
    add("rtx-01", RTX6000, "ESC8000A")
    evaluate_server(Server.objects.get(hostname="h200-01").pk)  # health checks ran on one
    Server.objects.create(hostname="empty-01", labels={"rack": "r9"})  # no report yet
    # Every server's documents, as the health worker writes them after a new snapshot's
    # evaluation (the ingest leaves them to it) and the services for each server they write.
    servers_changed(Server.objects.values_list("pk", flat=True))


def test_a_page_past_the_end_still_answers_404_and_an_empty_filter_an_empty_page(
    reader: APIClient, fleet: None
) -> None:
    assert reader.get("/api/v1/servers/", {"page": 9}).status_code == 404
    empty = reader.get("/api/v1/servers/", {"sku": "no such sku"}).json()
    assert (empty["count"], empty["results"]) == (0, [])


def test_the_server_list_costs_the_token_lookup_and_one_query_for_the_page(
    reader: APIClient, fleet: None, django_assert_max_num_queries: Any
) -> None:
    reader.get("/api/v1/servers/")  # the token's last use is written once a minute
    with django_assert_max_num_queries(2):
        assert reader.get("/api/v1/servers/", {"gpu_count": 8}).status_code == 200


def test_the_list_and_detail_read_each_servers_stored_documents_not_its_rows(
    reader: APIClient, fleet: None, django_assert_num_queries: Any
) -> None:
    reader.get("/api/v1/servers/")
    reader.get("/api/v1/servers/h200-01/")  # its class's analysis is kept as text
    fleet_changed()  # the list kept whole is computed again
    with django_assert_num_queries(1) as listed:
        assert reader.get("/api/v1/servers/").status_code == 200
    with django_assert_num_queries(2) as detail:  # which analysis version is current; the row
        assert reader.get("/api/v1/servers/h200-01/").status_code == 200
    assert '"analysis_analysis"' in detail.captured_queries[0]["sql"]
    read = " ".join(q["sql"] for q in listed.captured_queries + detail.captured_queries)
    assert '"health_serverdocument"."summary"' in listed.captured_queries[0]["sql"]
    assert '"health_serverdocument"."detail"' in detail.captured_queries[1]["sql"]
    with django_assert_num_queries(1):  # kept whole: only which analysis is current
        assert reader.get("/api/v1/servers/h200-01/").status_code == 200
    assert "health_serverhealth" not in read and "health_healthfinding" not in read


def test_a_filtered_list_page_is_one_query_on_real_columns(
    reader: APIClient, fleet: None, django_assert_num_queries: Any
) -> None:
    reader.get("/api/v1/servers/")  # the token is read and kept
    wanted = {"ordering": "-gpu_count", "has_nvlink": "true", "no_critical": "1"}
    with django_assert_num_queries(1) as listed:
        page = reader.get("/api/v1/servers/", wanted).json()
    sql = listed.captured_queries[0]["sql"]
    assert '"fleet_snapshot"."has_nvlink"' in sql
    assert '"health_serverhealth"."critical_count"' in sql
    assert '"fleet_snapshot"."document"' not in sql and '"fleet_server"."labels"' not in sql
    assert [row["hostname"] for row in page["results"]] == ["h200-01"]
    h200 = page["results"][0]
    assert (h200["gpu_count"], h200["has_nvlink"], h200["health"]) == (8, True, "ok")
    assert h200["fingerprint"] and h200["last_seen_at"] and h200["latest_snapshot_id"]


def test_a_repeated_read_is_answered_whole_until_a_write_changes_the_fleet(
    reader: APIClient, fleet: None, django_assert_num_queries: Any
) -> None:
    """List, selection and placement answers are kept whole under the fleet's version: asked
    again they take no query; any write that changes what they show replaces the version."""
    question = {"tp": 4, "pp": 2, "dp": 1}
    select = {"k": 2, "servers": [{"hostname": "h200-01"}]}
    asks = (
        lambda: reader.get("/api/v1/servers/", {"gpu_count": 8}),
        lambda: reader.post("/api/v1/servers/h200-01/placement/", question, format="json"),
        lambda: reader.post("/api/v1/placement/select/", select, format="json"),
    )
    first = [ask().content for ask in asks]
    with django_assert_num_queries(0):
        assert [ask().content for ask in asks] == first
    # A duplicate report from a server silent for longer than a kept read lives changes only
    # its last_seen_at: the list shows it at once.
    before = {r["hostname"]: r["last_seen_at"] for r in json.loads(first[0])["results"]}
    silent = timezone.now() - datetime.timedelta(seconds=KEPT_READ_S + 5)
    Server.objects.filter(hostname="h200-01").update(last_seen_at=silent)  # no write's path
    assert json.loads(asks[0]().content)["results"] == json.loads(first[0])["results"]
    add("h200-01", H200, "HGX H200")
    listed = json.loads(asks[0]().content)["results"]
    assert {r["hostname"]: r["last_seen_at"] for r in listed}["h200-01"] != before["h200-01"]
    # Another server of the kind: the list has it on the next ask.
    add("h200-02", H200, "HGX H200")
    assert "h200-02" in [r["hostname"] for r in json.loads(asks[0]().content)["results"]]


def test_a_duplicate_from_a_server_seen_lately_keeps_the_fleets_reads(
    reader: APIClient, fleet: None
) -> None:
    """A fleet's reports are mostly duplicates: one within KEPT_READ_S of the server's last
    report leaves kept reads as they are (their seen time at most 2 x KEPT_READ_S behind)."""
    wanted = {"gpu_count": 8}
    first = reader.get("/api/v1/servers/", wanted).content
    version = cache.get("fleet-version")
    seen = timezone.now() - datetime.timedelta(seconds=KEPT_READ_S - 5)
    Server.objects.filter(hostname="h200-01").update(last_seen_at=seen)
    add("h200-01", H200, "HGX H200")  # the same report again
    assert Server.objects.get(hostname="h200-01").last_seen_at > seen
    assert cache.get("fleet-version") == version
    assert reader.get("/api/v1/servers/", wanted).content == first


def test_an_answer_past_the_kept_size_is_served_as_computed_and_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from topoweb.config import answers

    monkeypatch.setattr(answers, "KEPT_READ_MAX_BYTES", 10)
    computed: list[bytes] = []

    def compute(body: bytes) -> bytes:
        computed.append(body)
        return body

    assert answers.kept_read(("big",), lambda: compute(b"x" * 11)) == b"x" * 11
    assert answers.kept_read(("big",), lambda: compute(b"x" * 11)) == b"x" * 11
    assert answers.kept_read(("small",), lambda: compute(b"y")) == b"y"
    assert answers.kept_read(("small",), lambda: compute(b"z")) == b"y"  # kept
    assert computed == [b"x" * 11, b"x" * 11, b"y"]


def test_kept_reads_are_computed_when_the_shared_cache_is_down(
    reader: APIClient, fleet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.cache import cache

    answered = reader.get("/api/v1/servers/", {"gpu_count": 8}).json()

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("cache down")

    reader.get("/api/v1/servers/h200-01/")  # the token is kept before the cache goes down
    monkeypatch.setattr(cache, "get", down)
    again = reader.get("/api/v1/servers/", {"gpu_count": 8})
    assert again.status_code == 200 and again.json() == answered


def test_a_filtered_list_asked_again_sees_servers_that_changed_in_between(
    reader: APIClient, fleet: None
) -> None:
    # The list's queryset is built once per set of filters and kept: each ask runs it anew.
    wanted = {"gpu_count": "8", "has_nvlink": "true"}
    first = reader.get("/api/v1/servers/", wanted).json()
    add("h200-02", H200, "HGX H200")
    when = timezone.now().replace(microsecond=0)
    Server.objects.filter(hostname="h200-01").update(last_seen_at=when)
    again = reader.get("/api/v1/servers/", wanted).json()
    assert again["count"] == first["count"] + 1
    assert "h200-02" in [row["hostname"] for row in again["results"]]
    seen = {row["hostname"]: row["last_seen_at"] for row in again["results"]}
    assert seen["h200-01"] == when.isoformat().replace("+00:00", "Z")


def test_the_server_detail_serves_the_stored_documents_unchanged(
    reader: APIClient, fleet: None, django_assert_max_num_queries: Any
) -> None:
    snapshot = Snapshot.objects.get(server__hostname="h200-01")
    reader.get("/api/v1/servers/")  # the token's first use: marked and audited, once a minute
    with django_assert_max_num_queries(5):
        body = reader.get("/api/v1/servers/h200-01/").json()

    assert body["snapshot"]["document"] == snapshot.document
    assert body["snapshot"]["hostname"] == "h200-01"
    assert body["snapshot"]["fingerprint"] == snapshot.topology_class.fingerprint
    assert (body["snapshot"]["nvml"], body["snapshot"]["host"]) == (None, snapshot.host)
    assert (body["snapshot_count"], body["benchmark_count"]) == (1, 0)


def test_the_server_detail_serves_the_analysis_kept_as_text_until_the_analysis_changes(
    reader: APIClient, fleet: None, django_assert_max_num_queries: Any
) -> None:

    first = reader.get("/api/v1/servers/h200-01/").json()
    # The server with the analysis's key; its findings, read once for the findings and their
    # groups (the token is kept in the cache since the first read).
    with django_assert_max_num_queries(2):
        again = reader.get("/api/v1/servers/h200-01/").json()
    analysis = Analysis.objects.get(topology_class__servers__hostname="h200-01")
    analysis.status, analysis.error = Analysis.Status.FAILED, "the model failed"
    analysis.save()
    changed = reader.get("/api/v1/servers/h200-01/").json()

    assert again == first
    assert (changed["analysis"]["status"], changed["analysis"]["error"]) == (
        "failed",
        "the model failed",
    )


def test_the_details_analysis_key_picks_what_current_analysis_picks(fleet: None) -> None:
    from topoweb.core.analysis import COST_MODEL_VERSION

    class_id = Server.objects.get(hostname="h200-01").topology_class_id
    current = Analysis.objects.get(topology_class_id=class_id)
    current_pk = current.pk
    assert current.cost_model_version == COST_MODEL_VERSION

    def both() -> tuple[Any, Any]:
        picked = analysis_selectors.current_analysis(class_id)
        assert picked is not None
        key = analysis_selectors.current_analysis_key(class_id)
        # The detail's own statement, by hostname, picks the same (its names from _meta).
        assert analysis_selectors.current_analysis_key(None, hostname="h200-01") == key
        return key, (picked.pk, picked.updated_at)

    older = Analysis.objects.create(
        topology_class_id=class_id, cost_model_version=COST_MODEL_VERSION - 1
    )
    newer = Analysis.objects.create(  # a later deploy's, rolled back since
        topology_class_id=class_id, cost_model_version=COST_MODEL_VERSION + 1
    )
    newer_pk, older_pk = newer.pk, older.pk
    with_current = both()
    current.delete()
    without_current = both()
    newer.delete()
    only_older = both()

    assert with_current[0] == with_current[1] and with_current[0][0] == current_pk
    assert without_current[0] == without_current[1] and without_current[0][0] == newer_pk
    assert only_older[0] == only_older[1] and only_older[0][0] == older_pk
    assert analysis_selectors.current_analysis_key(None) is None


def test_the_analysis_key_by_hostname_is_the_orms_for_every_server(fleet: None) -> None:
    """The statement the detail runs (written out on the cursor API) against the ORM's query
    of the same: every server, one with no class, and a name no server has."""
    for server in Server.objects.all():
        assert analysis_selectors.current_analysis_key(
            None, hostname=server.hostname
        ) == analysis_selectors.current_analysis_key(server.topology_class_id)
    assert Server.objects.filter(topology_class=None).exists()  # empty-01: no report yet
    assert analysis_selectors.current_analysis_key(None, hostname="no-such-host") is None


def test_a_repeated_read_takes_its_kept_answer_from_this_process_not_the_shared_cache(
    reader: APIClient, fleet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the token goes to the shared cache: the detail's analysis text and a placement
    answer, keyed by everything they depend on, come from this process's copy."""
    question = {"tp": 4, "pp": 2, "dp": 1}
    reader.get("/api/v1/servers/h200-01/")
    reader.post("/api/v1/servers/h200-01/placement/", question, format="json")
    trips = count_cache_calls(monkeypatch)
    assert reader.get("/api/v1/servers/h200-01/").status_code == 200
    assert trips == ["get_many", "get"]  # the token; the fleet's version (kept whole)
    trips.clear()
    placed = reader.post("/api/v1/servers/h200-01/placement/", question, format="json")
    assert placed.status_code == 200
    # The token, the throttle's count, the fleet's version; the answer is this process's.
    assert trips.count("get_many") == 1 and trips.count("get") == 1


def test_a_repeated_placement_question_is_answered_from_the_answer_computed_once(
    reader: APIClient, fleet: None, django_assert_max_num_queries: Any
) -> None:
    question = {"tp": 4, "pp": 2, "dp": 1}
    first = reader.post("/api/v1/servers/h200-01/placement/", question, format="json")
    with django_assert_max_num_queries(3):  # the token, the server, its calibrating runs
        again = reader.post("/api/v1/servers/h200-01/placement/", question, format="json")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()


def _ask(reader: APIClient, path: str, question: dict[str, Any]) -> Any:
    response = reader.post(path, question, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_answers_computed_once_change_when_a_benchmark_calibrates_the_server(
    reader: APIClient, fleet: None
) -> None:
    select = ("/api/v1/placement/select/", {"k": 2, "servers": [{"hostname": "rtx-01"}]})
    place = ("/api/v1/servers/rtx-01/placement/", {"tp": 2, "pp": 2, "dp": 1})
    before = [_ask(reader, *select), _ask(reader, *place)]
    assert [_ask(reader, *select), _ask(reader, *place)] == before  # from the kept answers
    add(
        "rtx-01",
        RTX6000,
        "ESC8000A",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    after = [_ask(reader, *select), _ask(reader, *place)]

    assert before[0]["selections"][0]["cost"]["calibrated"] is False
    assert after[0]["selections"][0]["cost"]["calibrated"] is True
    assert after[1] != before[1]


def test_a_refitted_calibration_makes_kept_questions_computed_again(
    reader: APIClient, fleet: None, django_assert_num_queries: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from topoweb.fleet.models import Benchmark
    from topoweb.fleet.services import refit_calibrations

    add(
        "rtx-01",
        RTX6000,
        "ESC8000A",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    place = ("/api/v1/servers/rtx-01/placement/", {"tp": 2, "pp": 2, "dp": 1})
    _ask(reader, *place)
    with django_assert_num_queries(0):
        _ask(reader, *place)  # kept whole
    # An older model's fit (a deploy's new COST_MODEL_VERSION), refitted by the worker.
    runs = Benchmark.objects.filter(server__hostname="rtx-01")
    for run in runs:
        run.calibration = {**run.calibration, "cost_model_version": 0}
        run.save(update_fields=["calibration"])
    assert refit_calibrations(runs) == 1
    with CaptureQueriesContext(connection) as asked:
        _ask(reader, *place)
    assert asked.captured_queries  # computed again, from the refitted run


def test_the_answers_computed_once_change_when_the_server_reports_another_topology(
    reader: APIClient, fleet: None
) -> None:
    select = ("/api/v1/placement/select/", {"k": 4, "servers": [{"hostname": "v100-03"}]})
    place = ("/api/v1/servers/v100-03/placement/", {"tp": 4, "pp": 2, "dp": 1})
    before = [_ask(reader, *select), _ask(reader, *place)]
    add("v100-03", H200, "HGX H200")  # the same name, now an NVSwitch server
    after = [_ask(reader, *select), _ask(reader, *place)]

    assert after[0]["selections"][0]["busbw_gbps"] > before[0]["selections"][0]["busbw_gbps"]
    assert after[1] != before[1]


QUESTION_BODIES = [
    (analysis_apis.SelectApi.SelectInputSerializer, {"k": 4, "servers": [{"hostname": "a"}]}),
    (
        analysis_apis.SelectApi.SelectInputSerializer,
        {"k": 2, "servers": [{"hostname": "a", "free": [1, 3]}, {"hostname": "b"}]},
    ),
    (analysis_apis.SelectApi.SelectInputSerializer, {"k": "3", "collective": "all_gather"}),
    (analysis_apis.SelectApi.SelectInputSerializer, {"k": 4, "servers": [{"hostname": " a "}]}),
    (analysis_apis.SelectApi.SelectInputSerializer, {"k": 2, "servers": [{"hostname": "a"}] * 2}),
    (analysis_apis.SelectApi.SelectInputSerializer, {"k": 0, "servers": []}),
    (analysis_apis.SelectApi.SelectInputSerializer, {"k": True, "collective": "gossip"}),
    (analysis_apis.SelectApi.SelectInputSerializer, ["k", 4]),
    (analysis_apis.SelectApi.SelectInputSerializer, None),
    (analysis_apis.PlacementApi.PlacementInputSerializer, {"tp": 4, "pp": 2, "dp": 1}),
    (
        analysis_apis.PlacementApi.PlacementInputSerializer,
        {"tp": 2, "pp": 1, "dp": 1, "free": [0, 5], "model": "llama-70b", "zero": 2, "seq": 512},
    ),
    (analysis_apis.PlacementApi.PlacementInputSerializer, {"tp": 4, "pp": 2, "dp": 1.0}),
    (analysis_apis.PlacementApi.PlacementInputSerializer, {"tp": 4, "pp": 2}),
    (analysis_apis.PlacementApi.PlacementInputSerializer, {"tp": 4, "pp": 2, "model": "gpt-9"}),
    (analysis_apis.PlacementApi.PlacementInputSerializer, {"tp": 4, "pp": 2, "dp": 1, "ep": 0}),
    (analysis_apis.JobApi.JobInputSerializer, {"k": 4, "tp": 2}),
    (analysis_apis.JobApi.JobInputSerializer, {"tp": 2, "pp": 2, "dp": 2}),
    (analysis_apis.CostApi.CostInputSerializer, {"collective": "all_reduce", "gpus": [0, 1]}),
]


def test_a_question_body_validates_as_a_fresh_serializer_validates_it() -> None:
    # Twice over, so that a body cannot pass on something a previous one left behind.
    for serializer_class, body in QUESTION_BODIES * 2:
        fresh = serializer_class(data=body)
        if fresh.is_valid():
            assert validated(serializer_class, body) == fresh.validated_data
        else:
            with pytest.raises(ValidationError) as refused:
                validated(serializer_class, body)
            assert refused.value.detail == fresh.errors


def test_a_new_benchmark_changes_the_model_the_answers_are_keyed_on(fleet: None) -> None:
    before = analysis_selectors.server_for_questions("rtx-01")
    add(
        "rtx-01",
        RTX6000,
        "ESC8000A",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    after = analysis_selectors.server_for_questions("rtx-01")

    assert analysis_selectors.model_key(after) != analysis_selectors.model_key(before)
    assert analysis_selectors.server_cost_model(after) is not (
        analysis_selectors.server_cost_model(before)
    )


def test_one_servers_question_keys_its_model_as_the_many_servers_question_does(
    fleet: None,
) -> None:
    add(  # own benchmarks; rtx-02 has none and takes its class's
        "rtx-01",
        RTX6000,
        "ESC8000A",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    add("rtx-02", RTX6000, "ESC8000A")
    names = ["rtx-01", "rtx-02", "h200-01", "v100-01"]
    many = {s.hostname: s for s in analysis_selectors.servers_for_questions(None)}
    named = dict(zip(names, analysis_selectors.servers_for_questions(names), strict=True))
    for hostname in names:
        one = analysis_selectors.server_for_questions(hostname)
        for other in (many[hostname], named[hostname]):
            assert one.calibration == other.calibration, hostname  # type: ignore[attr-defined]
            assert analysis_selectors.model_key(one) == analysis_selectors.model_key(other)
    # rtx-02 is keyed on its class's runs, named as the database's own aggregate names them.
    rtx_02 = analysis_selectors.server_for_questions("rtx-02")
    assert rtx_02.topology_class_id is not None
    assert rtx_02.calibration == analysis_selectors.class_benchmark_set(  # type: ignore[attr-defined]
        rtx_02.topology_class_id
    )
    assert rtx_02.calibration  # type: ignore[attr-defined]
    assert not many["h200-01"].calibration  # type: ignore[attr-defined]


def test_a_server_without_benchmarks_is_keyed_on_its_classs(fleet: None) -> None:
    add("v100-04", V100, "DGX-1V")
    add(
        "v100-01",
        V100,
        "DGX-1V",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    keyed = analysis_selectors.server_for_questions("v100-04").calibration  # type: ignore[attr-defined]
    own = analysis_selectors.server_for_questions("v100-01").calibration  # type: ignore[attr-defined]
    assert keyed == own != ""
    assert analysis_selectors.server_for_questions("h200-01").calibration == ""  # type: ignore[attr-defined]


def test_a_revoked_token_or_a_deactivated_user_is_refused_at_once(fleet: None) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token('sched')}")
    assert client.get("/api/v1/servers/").status_code == 200

    # Saved as the admin saves them: tokens are kept in the cache, forgotten on save/delete
    # (fleet.cached_tokens); QuerySet.update() sends no signal and is not a way to revoke.
    user = get_user_model().objects.get(username="sched")
    user.is_active = False
    user.save()
    assert client.get("/api/v1/servers/").status_code == 401
    user.is_active = True
    user.save()
    assert client.get("/api/v1/servers/").status_code == 200
    token = ApiToken.objects.get()
    token.revoked = True
    token.save()
    assert client.get("/api/v1/servers/").status_code == 401


def test_the_renderer_writes_what_drfs_writes() -> None:
    data = {
        "when": datetime.datetime(2026, 11, 29, 10, 0, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 11, 29),
        "price": decimal.Decimal("1.5"),
        "lazy": gettext_lazy("text"),
        7: ("a", "b"),
        "separators": "\u2028 and \u2029",
        "nested": [{"x": 1.25, "y": None, "z": True}],
    }
    assert JSONRenderer().render(data) == DrfJSONRenderer().render(data)


def test_the_renderer_falls_back_for_what_orjson_refuses_and_keeps_raw_json() -> None:
    data = {"big": 2**70, "stored": raw_json('{"a": [1, 2]}')}
    assert json.loads(JSONRenderer().render(data)) == {"big": 2**70, "stored": {"a": [1, 2]}}
    assert JSONRenderer().render({"stored": raw_json('{"a": 1}')}) == b'{"stored":{"a": 1}}'


def test_a_duplicate_report_is_recognised_before_any_parsing(
    collector_client: Any, monkeypatch: pytest.MonkeyPatch, django_assert_max_num_queries: Any
) -> None:
    from tests.web.conftest import report
    from topoweb.fleet import services

    client = collector_client("h200-01")
    body = report("h200-01", nvml={"gpus": []})
    first = client.post("/api/v1/reports/", body, format="json")
    seen = Server.objects.get(hostname="h200-01").last_seen_at

    def no_parsing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a duplicate must not be parsed")

    monkeypatch.setattr(services, "parse_text", no_parsing)
    with django_assert_max_num_queries(2):  # the token; the stored snapshot, marked seen
        again = client.post("/api/v1/reports/", body, format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["created"] is False
    assert again.json()["warnings"] == first.json()["warnings"]
    assert Server.objects.get(hostname="h200-01").last_seen_at > seen
    changed = report("h200-01", nvml={"gpus": [{"name": "NVIDIA H200"}]})
    with pytest.raises(AssertionError, match="must not be parsed"):
        client.post("/api/v1/reports/", changed, format="json")  # new content is parsed


# --- one cost model per kind of server --------------------------------------------------------


def _device_report(hostname: str, uuid: str, memory_total_bytes: int) -> Server:
    """The real collector report of tests/fixtures/device_01 (one H200) stored for `hostname`,
    with its GPU's UUID and memory total changed: what two servers of one kind report."""
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

    report = json.loads(fixture_text("device_01_h200-1gpu-firecracker-vm-collector-dryrun.json"))
    gpu = report["nvml"]["gpus"][0]
    gpu["uuid"], gpu["memory_total_bytes"] = uuid, memory_total_bytes
    ingest_report(
        hostname=hostname,
        topo_text=report["topo_text"],
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        nvml=report["nvml"],
        host=report["host"],
    )
    return analysis_selectors.server_for_questions(hostname)


def test_servers_wired_and_numbered_alike_share_one_cost_model() -> None:
    first = _device_report("h200-a", "GPU-aaaa", 150754820096)
    second = _device_report("h200-b", "GPU-bbbb", 150754820096)
    assert first.latest_snapshot and second.latest_snapshot
    assert first.latest_snapshot.content_sha256 != second.latest_snapshot.content_sha256
    assert first.latest_snapshot.wiring_sha256 == second.latest_snapshot.wiring_sha256 != ""
    assert analysis_selectors.model_key(first) == analysis_selectors.model_key(second)
    assert analysis_selectors.server_cost_model(first) is (
        analysis_selectors.server_cost_model(second)
    )
    # A server of another wiring keeps its own.
    add("v100-01", V100, "DGX-1V")
    other = analysis_selectors.server_for_questions("v100-01")
    assert analysis_selectors.model_key(other) != analysis_selectors.model_key(first)


def test_placement_answers_of_servers_sharing_a_model_keep_their_own_gpu_memory() -> None:
    from topoweb.core.ledger import Layout

    roomy = _device_report("h200-a", "GPU-aaaa", 150754820096)
    small = _device_report("h200-b", "GPU-bbbb", 16 * 2**30)
    assert small.latest_snapshot and small.latest_snapshot.gpu_memory_bytes == 16 * 2**30
    shape = questions.resolve_shape("llama-7b")
    answers = [
        questions.placement_for(server, Layout(1, 1, 1), None, shape)
        for server in (roomy, small, roomy)
    ]
    assert [a["fits"] for a in answers] == [True, False, True]
    assert answers[0] == answers[2]


def test_a_question_over_many_servers_loads_each_one_row_and_no_snapshot(
    fleet: None, django_assert_max_num_queries: Any
) -> None:
    names = ["h200-01", "v100-01", "v100-02", "v100-03", "rtx-01"]
    with django_assert_max_num_queries(2):  # their rows, and their runs grouped
        servers = analysis_selectors.servers_for_questions(names)
    assert [s.hostname for s in servers] == names
    Server.objects.filter(hostname="v100-02").update(labels={"rail_group": "leaf-7"})
    every = analysis_selectors.servers_for_questions(None, rails=True)
    assert [s.hostname for s in every] == sorted(names)  # empty-01 has no topology
    for server in every:
        plain = Server.objects.select_related("latest_snapshot", "topology_class").get(
            hostname=server.hostname
        )
        assert analysis_selectors.model_key(server) == analysis_selectors.model_key(plain)
        assert questions.rail_group(server) == questions.rail_group(plain)
    assert {questions.rail_group(s) for s in every} >= {"rail_group=leaf-7"}
    with pytest.raises(Http404, match="'nowhere-01'"):
        analysis_selectors.servers_for_questions(["h200-01", "nowhere-01"])


def test_the_migration_fills_in_what_ingest_stores(fleet: None) -> None:
    import importlib

    from django.apps import apps
    from django.db import connection

    _device_report("h200-a", "GPU-aaaa", 150754820096)
    stored = list(Snapshot.objects.values_list("pk", "wiring_sha256", "gpu_memory_bytes"))
    assert {m for _, _, m in stored} == {None, 150754820096}
    Snapshot.objects.update(wiring_sha256="", gpu_memory_bytes=None)
    migration = importlib.import_module("topoweb.fleet.migrations.0005_snapshot_wiring_sha256")

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection  # type: ignore[attr-defined]
    migration.fill_in(apps, editor)
    assert sorted(Snapshot.objects.values_list("pk", "wiring_sha256", "gpu_memory_bytes")) == (
        sorted(stored)
    )


def test_a_selection_over_many_servers_is_kept_without_its_servers(
    fleet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import weakref

    read = analysis_selectors.servers_for_questions
    watched: list[weakref.ref[Server]] = []

    def watching(*args: Any, **kwargs: Any) -> list[Server]:
        servers = read(*args, **kwargs)
        watched.extend(map(weakref.ref, servers))
        return servers

    monkeypatch.setattr(analysis_selectors, "servers_for_questions", watching)
    wanted = [("v100-01", [0, 1, 2, 3]), ("v100-02", None), ("h200-01", [4, 5, 6, 7])]
    first = questions.selection(2, wanted, "all_reduce")
    assert questions.selection(2, list(wanted), "all_reduce") == first  # kept
    # The model cache keeps the server each model was first loaded from (256 at most); the
    # kept answers keep none.
    analysis_selectors.cached_model.cache_clear()
    gc.collect()
    assert len(watched) == 6 and all(ref() is None for ref in watched)
    # Another free set is another question.
    other = questions.selection(2, [*wanted[:2], ("h200-01", [0, 1])], "all_reduce")
    assert other["selections"][0]["hostname"] == "h200-01"
    assert other["selections"][0]["gpus"] == [0, 1] != first["selections"][0]["gpus"]


def test_a_write_replaces_the_fleets_version_once_at_commit_and_its_own_reads_see_it(
    django_capture_on_commit_callbacks: Any,
) -> None:
    from django.core.cache import cache

    from topoweb.config import answers

    version = answers._fleet_version()
    assert answers.kept_read(("read",), lambda: b"before") == b"before"
    with django_capture_on_commit_callbacks(execute=True) as committed:
        answers.fleet_changed()
        # Other processes keep the version until the write commits; the writer's own
        # reads inside its transaction are computed again.
        assert cache.get(answers._VERSION_KEY) == version
        assert answers.kept_read(("read",), lambda: b"after") == b"after"
    assert len(committed) == 1
    assert answers._fleet_version() not in (None, version)
