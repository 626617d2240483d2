"""Company sign-in end to end: a real OpenID Connect provider (django-oauth-toolkit, in its own
process, tests/oidc_provider) and topoweb under gunicorn with TOPOWEB_OIDC=1, driven by
Chromium. The provider's groups decide who gets in and who may upload; the sign-in, an upload
and a token's use land in the audit trail."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import FIXTURES, wait_for_flag
from tests.web import live

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_STATIC = "whitenoise.storage.CompressedManifestStaticFilesStorage"


@pytest.fixture(scope="module")
def stack(django_db_setup: None, tmp_path_factory: Any) -> Iterator[dict[str, str]]:
    provider_port, rp_port = live.free_ports(2)
    rp = f"http://127.0.0.1:{rp_port}"
    provider = f"http://localhost:{provider_port}"  # another host: cookies of its own
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    tmp = tmp_path_factory.mktemp("oidc")
    env = {
        "PATH": os.environ["PATH"],
        "OIDC_PROVIDER_DB": str(tmp / "provider.sqlite3"),
        "OIDC_PROVIDER_RSA_KEY": pem,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider.serve", str(provider_port),
         f"{rp}/oidc/callback/"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{provider}/o/.well-known/jwks.json", timeout=2).read()
                break
            except OSError:
                assert process.poll() is None, "the provider exited"
                assert time.monotonic() < deadline, "the provider did not start"
                time.sleep(0.3)
        # Production settings (DEBUG off, the image's static storage), the static files
        # collected first as the image's build does, here into a directory of the test's own.
        static = {"STATIC_ROOT": str(tmp / "static"), "STATICFILES_BACKEND": PRODUCTION_STATIC}
        collected = subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
            cwd=ROOT, env=live.environment(**static), capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert collected.returncode == 0, collected.stderr[-2000:]
        settings = {
            **static,
            "TOPOWEB_OIDC": "1",
            "OIDC_RP_CLIENT_ID": "topoweb",
            "OIDC_RP_CLIENT_SECRET": "topoweb-secret",
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{provider}/o/authorize/",
            "OIDC_OP_TOKEN_ENDPOINT": f"{provider}/o/token/",
            "OIDC_OP_USER_ENDPOINT": f"{provider}/o/userinfo/",
            "OIDC_OP_JWKS_ENDPOINT": f"{provider}/o/.well-known/jwks.json",
            "TOPOWEB_OIDC_VIEW_GROUPS": "topoweb-readers",
            "TOPOWEB_OIDC_UPLOAD_GROUPS": "topoweb-uploaders",
            "TOPOWEB_OIDC_ADMIN_GROUPS": "topoweb-admins",
        }
        with live.gunicorn(1, port=rp_port, **settings) as (base, _):
            yield {"rp": base, "provider": provider, "provider_db": env["OIDC_PROVIDER_DB"]}
    finally:
        process.terminate()
        process.wait(timeout=30)


def sign_in(browser: Browser, stack: dict[str, str], who: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{stack['rp']}/accounts/login/")
    page.click("#company-sign-in")
    page.wait_for_url(re.compile(rf"^{re.escape(stack['provider'])}/accounts/login/"))
    page.fill("#corp-username", who)
    page.fill("#corp-password", "corp-pass")
    page.click("#corp-submit")
    return page


def test_a_person_in_the_upload_group_signs_in_uploads_and_uses_a_token(
    browser: Browser, stack: dict[str, str]
) -> None:
    from django.contrib.auth.models import User

    from topoweb.fleet.access import create_api_token
    from topoweb.fleet.models import AuditEvent, Server

    page = sign_in(browser, stack, "alice")
    page.wait_for_url(f"{stack['rp']}/")
    alice = User.objects.get(username="alice")
    assert alice.email == "alice@example.com" and not alice.has_usable_password()
    assert alice.has_perm("fleet.upload_files") and not alice.is_staff

    page.goto(f"{stack['rp']}/upload/")
    page.fill("#upload-hostname", "oidc-upload-01")
    page.set_input_files("#upload-file", str(FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt"))
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    page.check("#upload-create")
    page.click("#save-button")
    page.wait_for_url(re.compile(r"/servers/oidc-upload-01/$"))
    assert Server.objects.filter(hostname="oidc-upload-01").exists()

    token = create_api_token("alice")
    status, _, _ = live.call(f"{stack['rp']}/api/v1/servers/", token)
    assert status == 200

    signed = AuditEvent.objects.get(kind="sign_in", actor="alice")
    assert signed.detail["backend"] == "topoweb.fleet.oidc.CompanySignIn"
    assert signed.address == "127.0.0.1"
    upload = AuditEvent.objects.get(kind="upload", actor="alice")
    assert upload.subject == "oidc-upload-01" and upload.detail["created"] is True
    used = AuditEvent.objects.get(kind="token_used", actor="alice")
    assert used.subject == token.partition(".")[0]  # the package key's prefix
    assert used.detail["path"] == "/api/v1/servers/"
    page.close()


def test_the_providers_groups_decide_who_reads_and_who_gets_in(
    browser: Browser, stack: dict[str, str]
) -> None:
    from django.contrib.auth.models import User

    reader = sign_in(browser, stack, "bob")
    reader.wait_for_url(f"{stack['rp']}/")
    bob = User.objects.get(username="bob")
    assert not bob.has_perm("fleet.upload_files")
    reader.close()

    outsider = sign_in(browser, stack, "eve")  # only in "marketing"
    outsider.wait_for_url(re.compile(r"/accounts/login/\?company=refused"))
    expect(outsider.locator("[role=alert]")).to_contain_text("not in a group allowed here")
    assert not User.objects.filter(username="eve").exists()
    outsider.close()


def move_in_provider(stack: dict[str, str], who: str, group: str) -> None:
    """What the company's directory does: the person now holds `group` alone."""
    with sqlite3.connect(stack["provider_db"]) as db:
        (user,) = db.execute("SELECT id FROM auth_user WHERE username = ?", (who,)).fetchone()
        db.execute("INSERT OR IGNORE INTO auth_group (name) VALUES (?)", (group,))
        (gid,) = db.execute("SELECT id FROM auth_group WHERE name = ?", (group,)).fetchone()
        db.execute("DELETE FROM auth_user_groups WHERE user_id = ?", (user,))
        db.execute("INSERT INTO auth_user_groups (user_id, group_id) VALUES (?, ?)", (user, gid))


def test_the_admin_group_makes_staff_and_what_the_provider_takes_back_goes_at_the_next_sign_in(
    browser: Browser, stack: dict[str, str]
) -> None:
    from django.contrib.auth.models import User

    admin = sign_in(browser, stack, "carol")
    admin.wait_for_url(f"{stack['rp']}/")
    carol = User.objects.get(username="carol")
    assert carol.is_staff and carol.is_superuser and carol.has_perm("fleet.upload_files")
    admin.goto(f"{stack['rp']}/admin/fleet/auditevent/")
    expect(admin.locator("#content h1")).to_contain_text("audit")
    admin.close()

    move_in_provider(stack, "carol", "topoweb-readers")
    again = sign_in(browser, stack, "carol")
    again.wait_for_url(f"{stack['rp']}/")
    carol = User.objects.get(username="carol")
    assert not carol.is_staff and not carol.is_superuser
    assert not carol.has_perm("fleet.upload_files") and carol.is_active
    again.goto(f"{stack['rp']}/admin/fleet/auditevent/")
    again.wait_for_url(re.compile(r"/admin/login/"))  # staff only
    again.close()
