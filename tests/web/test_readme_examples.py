"""The README's API examples run verbatim against the demo fleet's servers they name (loaded as
`manage.py load_demo` loads them: same capture, same GPU model), with a reader's token as
`$H`: every call answers 200, and the advice endpoints' answers hold what the README says they
hold."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.readme_examples import Curl, curls
from topoweb.fleet.management.commands import load_demo

EXAMPLES = curls()


def _demo_server(hostname: str) -> None:
    """One server of the demo fleet, as load_demo stores it."""
    stem = re.sub(r"-a\d\d$", "", hostname)
    (number,) = [n for n, (s, _sku) in load_demo.FLEET_NAMES.items() if s == stem]
    index = load_demo._read_index(load_demo.FIXTURES / "INDEX.tsv")
    (name,) = [n for n in index if n.startswith(f"topo_{number}_")]
    text = (load_demo.FIXTURES / name).read_text(encoding="utf-8")
    load_demo._ingest(hostname, text, [], index[name])


def _send(reader: APIClient, call: Curl) -> Any:
    if call.method == "GET":
        return reader.get(call.path)
    body = json.dumps(call.body)
    return reader.generic(call.method, call.path, data=body, content_type="application/json")


def test_the_readme_shows_each_advice_endpoint() -> None:
    paths = {re.sub(r"/servers/[^/]+/", "/servers/NAME/", c.path) for c in EXAMPLES}
    for endpoint in (
        "/api/v1/placement/select/",
        "/api/v1/placement/job/",
        "/api/v1/servers/NAME/placement/",
        "/api/v1/servers/NAME/recommendation/",
        "/api/v1/servers/NAME/serving/",
        "/api/v1/serving/",
    ):
        assert endpoint in paths, endpoint


@pytest.mark.django_db
@pytest.mark.parametrize("call", EXAMPLES, ids=str)
def test_each_readme_api_example_answers_as_it_says(reader: APIClient, call: Curl) -> None:
    for hostname in sorted(call.hostnames or {"hgx-h200-a01", "hgx-h100-a01"}):
        _demo_server(hostname)
    response = _send(reader, call)
    assert response.status_code == 200, (call, response.content[:500])
    doc = response.json()
    if call.path.endswith("/serving/") and "/servers/" in call.path:
        best = doc["recommended"]
        assert {"tp", "pp", "replicas", "gpus", "memory_per_gpu"} <= set(best)
        assert "assumed" in doc and doc["notes"] == []  # within the model's context window
    elif call.path == "/api/v1/serving/":
        assert doc["servers"] and all(s["notes"] == [] for s in doc["servers"])
    elif call.path.endswith("/recommendation/"):
        # 70B on one 8x H200: the smallest fit over servers, TP8 inside each, memory left said.
        assert doc["fits"] or doc["no_fit"]["smallest_layout"]["tp"] == 8
        assert "levers" in doc and "assumed" in doc
    elif call.path == "/api/v1/placement/job/":
        (best, *_rest) = doc["selections"]
        assert [len(p["gpus"]) for p in best["servers"]] == [8, 8]
        assert [n["dimension"] for n in best["network"]] == ["pp"] and best["fits"]
        assert best["memory"]["left_fraction"] >= 0.10
