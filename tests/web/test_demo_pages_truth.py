"""Issue 27's "done when" over the whole demo fleet: no server page answers more than one
finding per cause, and every assumed fact its graph draws says so (the CPU socket link, an
NVSwitch fabric read from the bundles, the links' catalogue figures)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command

from topoweb.core.health import Finding
from topoweb.core.health.groups import cause_of
from topoweb.fleet.models import Server
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db


def test_every_demo_server_page_gives_one_finding_per_cause_and_marks_its_guesses(
    reader: Any,
) -> None:
    call_command("load_demo", stdout=io.StringIO(), stderr=io.StringIO())
    hosts = list(Server.objects.order_by("hostname").values_list("pk", "hostname"))
    grouped = 0
    for pk, _ in hosts:
        evaluate_server(pk)
    for _, hostname in hosts:
        page = json.loads(reader.get(f"/api/v1/servers/{hostname}/page/").content)
        groups, findings = page["groups"], page["findings"]
        causes = [g["cause"] for g in groups]
        assert len(causes) == len(set(causes)), hostname
        assert sum(g["count"] for g in groups) == len(findings), hostname
        for g in groups:
            members = {cause_of(Finding.from_document(f)) for f in g["findings"]}
            assert members == {g["cause"]}, (hostname, g["title"])
        # P2P that is unavailable is one line: the finding that says so and the pairs it made
        # slow as host-staged copies (the GTX rig showed a warning beside a critical line).
        no_p2p = [
            g
            for g in groups
            if any(
                f["kind"] == "p2p_unavailable" or "host-staged" in f["message"]
                for f in g["findings"]
            )
        ]
        assert len(no_p2p) <= 1, (hostname, [g["title"] for g in no_p2p])
        grouped += len(findings) - len(groups)
        graph = page.get("graph") or {}
        if graph:  # the links' figures say what they rest on (the tooltips show it)
            assert graph["figures"]["basis"], hostname
        for element in graph.get("elements", []):
            data = element["data"]
            if data.get("link_class") == "SYS" or data.get("kind") == "interconnect":
                assert "(assumed)" in (data.get("label") or ""), (hostname, data["id"])
                assert data.get("assumed"), (hostname, data["id"])
            if data.get("kind") == "nvswitch":  # read from the bundles: says how
                assert data.get("inferred"), (hostname, data["id"])
    assert grouped >= 19  # the GTX rig's 22 findings are 3 lines, and others fold too
