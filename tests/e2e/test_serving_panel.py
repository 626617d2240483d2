"""The server page's serving panel in a real browser: it shows the serving API's answer, and
says what it assumed when the capture names no GPU."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import A100_TOPO, H200, ingest, wait_for_flag, wait_for_graph

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def serving_api(page: Page, hostname: str, body: dict) -> dict:  # type: ignore[type-arg]
    """The serving API's own answer, asked through the signed-in page's session."""
    return page.evaluate(
        """([host, body]) => fetch(`/api/v1/servers/${encodeURIComponent(host)}/serving/`, {
          method: "POST", credentials: "same-origin",
          headers: {"Content-Type": "application/json", "X-CSRFToken":
            document.cookie.match(/csrftoken=([^;]+)/)[1]},
          body: JSON.stringify(body)}).then((r) => r.json())""",
        [hostname, body],
    )


def test_the_serving_panel_shows_replicas_memory_and_latency_as_the_api_answers(
    page: Page, fleet: None
) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    page.select_option("#serving-form select[name=model]", "llama-70b")
    page.fill("#serving-form input[name=context_tokens]", "8192")
    page.fill("#serving-form input[name=concurrency]", "16")
    page.click("#serving-form button[type=submit]")
    wait_for_flag(page, "serving-ready")
    api = serving_api(page, H200, {"model": "llama-70b", "context_tokens": 8192, "concurrency": 16})
    best = api["recommended"]
    plural = "s" if best["replicas"] > 1 else ""
    head = f"TP{best['tp']} × {best['replicas']} replica{plural}"
    expect(page.locator("#serving-head")).to_contain_text(head)
    expect(page.locator("#serving-head")).to_contain_text("Llama-style 70B (bf16), 16 × 8192")
    result = page.locator("#serving-result")
    expect(result).to_contain_text(f"{best['max_concurrency']} at 8192 tokens")
    expect(result).to_contain_text("Time per output token")
    # Llama 2 70B's card says 4096 tokens: 8192 is past its window, and the panel says so.
    (note,) = api["notes"]
    expect(result.locator(".serving-note")).to_have_text(note)
    # An H200 named without its memory: the catalogue's size, said as an assumption.
    expect(page.locator("#serving-assumed")).to_contain_text("memory: 141 GB")


def test_a_server_without_a_gpu_name_says_what_the_advice_assumed(page: Page, fleet: None) -> None:
    ingest("e2e-anon-01", A100_TOPO)
    page.goto("/servers/e2e-anon-01/")
    wait_for_graph(page)
    page.click("#serving-form button[type=submit]")
    wait_for_flag(page, "serving-ready")
    expect(page.locator("#serving-assumed")).to_contain_text("GPU model: A100 80GB")
    expect(page.locator("#serving-assumed")).to_contain_text("at most 85% of it is planned for")


def test_the_recommended_layout_per_model_names_its_levers_and_memory_left(
    page: Page, fleet: None
) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    recs = page.evaluate(
        """(host) => fetch(`/api/v1/servers/${encodeURIComponent(host)}/page/`,
          {credentials: "same-origin"}).then((r) => r.json()).then((d) => d.recommendations)""",
        H200,
    )
    pulled = 0
    for key, rec in recs.items():
        item = page.locator(f"ul.recommendations li[data-preset='{key}']")
        if rec["recommended"]:
            mem = rec["recommended"]["memory"]
            expect(item).to_contain_text(f"{mem['left_gb']:.1f} GB left")
            levers = rec["levers"]
        else:
            mem = rec["no_fit"]["memory"]
            expect(item).to_contain_text(f"{mem['left_gb']:.1f} GB left; 15% kept back")
            levers = rec["no_fit"]["levers"]
        for lever in levers:
            expect(item).to_contain_text(lever)
        pulled += bool(levers)
    # 8x H200: GPT-3 175B fits 4 such servers once its micro-batch is lowered; the page says so.
    assert pulled >= 1, recs


def test_a_placement_that_fits_only_with_levers_names_them_on_the_page(
    page: Page, fleet: None
) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    for name, value in (("tp", "1"), ("pp", "1"), ("dp", "8")):
        page.fill(f"#placement-form input[name={name}]", value)
    page.select_option("#placement-form select[name=model]", "llama-13b")
    page.select_option("#placement-form select[name=zero]", "0")
    page.click("#placement-form button[type=submit]")
    wait_for_flag(page, "placement-ready")
    # ZeRO-0 asked: 12 bytes of Adam state a parameter do not fit 141 GB; ZeRO-1 alone does.
    expect(page.locator("#placement-result .placement-levers")).to_have_text(
        "Fits with ZeRO-1 (optimizer state sharded over DP)."
    )
    expect(page.locator("#placement-result .memory-fit")).to_have_attribute("data-fits", "true")
