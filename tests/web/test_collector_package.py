"""The collector as a wheel: built once per session from collector/pyproject.toml, installed
with pip into a fresh virtualenv (no checkout on its path), and run by its console script:
a dry run over a fake nvidia-smi replaying a real capture, and a first contact that trades the
fleet's enrollment secret for the host's token against a live topoweb."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import FIXTURES
from topoweb.fleet.models import CollectorToken, Snapshot

ROOT = Path(__file__).resolve().parent.parent.parent
TOPO = "topo_01_h200-8gpu-12nic-numaid.txt"  # a real `nvidia-smi topo -m` of an 8x H200


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a fresh virtualenv with only the built wheel (and its one dependency)."""
    work = tmp_path_factory.mktemp("collector-wheel")
    source = work / "collector"
    shutil.copytree(
        ROOT / "collector", source, ignore=shutil.ignore_patterns("__pycache__", "build")
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         str(source), "-w", str(work / "dist")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("topoweb_collector-*-py3-none-any.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return venv / "bin"


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> Path:
    """An nvidia-smi that replays the real capture for `topo -m` and fails otherwise."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        f"#!/bin/sh\n"
        f'if [ "$*" = "topo -m" ]; then exec cat {FIXTURES / TOPO}; fi\n'
        f'echo "Invalid combination of input arguments." >&2; exit 2\n'
    )
    script.chmod(0o755)
    return script


def run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH and a directory without the checkout: only the wheel can answer.
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [str(bin_dir / "topoweb-collector"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_wheel_installs_a_working_console_script(
    installed: Path, fake_nvidia_smi: Path, tmp_path: Path
) -> None:
    where = subprocess.run(
        [str(installed / "python"), "-c", "import collector; print(collector.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert str(installed.parent / "lib") in where.stdout  # from site-packages, not the checkout

    dry = run(installed, "--dry-run", "--nvidia-smi", str(fake_nvidia_smi),
              "--hostname", "gpu-w01", cwd=tmp_path)  # fmt: skip

    assert dry.returncode == 0, dry.stderr
    body = json.loads(dry.stdout)
    assert body["hostname"] == "gpu-w01"
    assert body["topo_text"] == (FIXTURES / TOPO).read_text()
    assert body["collector_version"] == "0.1.0"
    assert body["nvml"]["available"] is False  # no driver here: said, not guessed
    assert run(installed, "--version", cwd=tmp_path).stdout.strip() == "topoweb-collector 0.1.0"


@pytest.mark.django_db(transaction=True)
def test_first_contact_trades_the_enrollment_secret_for_the_hosts_token(
    installed: Path, fake_nvidia_smi: Path, tmp_path: Path, live_server: Any, settings: Any
) -> None:
    settings.TOPOWEB_ENROLLMENT_TOKEN = "fleet-enrollment-secret"
    (tmp_path / "enrollment").write_text("fleet-enrollment-secret\n")
    token_file = tmp_path / "state" / "token"
    args = [
        "--once", "--server", live_server.url, "--token-file", str(token_file),
        "--enroll-token-file", str(tmp_path / "enrollment"), "--nvidia-smi",
        str(fake_nvidia_smi), "--hostname", "gpu-e01", "--spool-dir", str(tmp_path / "spool"),
        "--retry-for", "5",
    ]  # fmt: skip

    first = run(installed, *args, cwd=tmp_path)

    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    (token,) = CollectorToken.objects.filter(hostname="gpu-e01")
    assert token.hashed_key and token.last_used_at is not None  # the report used it
    assert Snapshot.objects.filter(server__hostname="gpu-e01").count() == 1
    # The next run keeps the host's own token; enrolling again is refused.
    again = run(installed, *args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert CollectorToken.objects.filter(hostname="gpu-e01").count() == 1
    token_file.unlink()
    refused = run(installed, *args, cwd=tmp_path)
    assert refused.returncode == 1
    assert "enrollment refused (409)" in refused.stderr and "already enrolled" in refused.stderr


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("secret", "given", "status"),
    [("s3cret", "s3cret", 201), ("s3cret", "wrong", 401), ("", "", 404)],
)
def test_the_enroll_endpoint_wants_the_secret_and_is_off_without_one(
    client: Any, settings: Any, secret: str, given: str, status: int
) -> None:
    settings.TOPOWEB_ENROLLMENT_TOKEN = secret

    answer = client.post(
        "/api/v1/enroll/",
        {"hostname": "gpu-e02"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {given}",
    )

    assert answer.status_code == status, answer.content
    assert CollectorToken.objects.filter(hostname="gpu-e02").exists() == (status == 201)
    if status == 201:
        found = CollectorToken.objects.get_from_key(answer.json()["token"])
        assert found.hostname == "gpu-e02"
