"""Pages that explain themselves (issue 27 items 5-9): uploads, the upload form, findings by
cause, rows that make sense, and what the pages guessed, each read back from a real Chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.e2e.conftest import FIXTURES, wait_for_flag

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

H20_TOPO = "topo_38_h20-8gpu-36nic-MANGLED-tab-expansion-merged-cells.txt"


def test_the_new_server_checkbox_sits_on_its_label_line(page: Page) -> None:
    page.goto("/upload/")
    box = page.locator("#upload-create").bounding_box()
    label = page.locator("label:has(#upload-create)").bounding_box()
    assert box is not None and label is not None
    assert abs(box["x"] - label["x"]) < 8  # at the label's start, not centred above it
    assert label["height"] < 2 * box["height"] + 8  # one line, the box beside its text


def test_a_preview_of_a_36_nic_capture_draws_its_nic_groups_at_their_places(page: Page) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "preview-h20")
    page.fill("#upload-text", (FIXTURES / H20_TOPO).read_text(encoding="utf-8"))
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    shown = page.evaluate(
        """() => { const cy = window.topowebPreviewCy;
        return {groups: cy.nodes('[kind = "nic_group"]:visible').length,
                nics: cy.nodes('[kind = "nic"]:visible').length}; }"""
    )
    assert shown == {"groups": 4, "nics": 0}
