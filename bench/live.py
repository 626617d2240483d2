"""A live topoweb for the benchmarks: gunicorn on loopback over its own PostgreSQL database
(`<DATABASE_URL's name>_bench`, recreated each run), with Django set up in this process so the
script can seed rows and create tokens."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# Debian's Chromium, headless in a container: no sandbox, no GPU, nothing fetched on its own.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def live_server(workers: int = 4, port: int | None = None, **settings: str) -> Iterator[str]:
    """Yield the base URL of a fresh server, on a database made anew and an emptied cache (the
    Redis database in REDIS_URL); SystemExit(2) when DATABASE_URL is not postgres.
    `settings` are extra environment variables for the server (e.g. TOPOWEB_INGEST_RATE). The
    port is `port`, else BENCH_PORT, else any free one; TOPOWEB_TEST_DB_SUFFIX, as the test
    settings read it, keeps several checkouts' bench databases apart."""
    database_url = os.environ.setdefault(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/topoweb"
    )
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    if not database_url.startswith("postgres"):
        print(
            "the benchmarks measure PostgreSQL: DATABASE_URL must be postgres://", file=sys.stderr
        )
        raise SystemExit(2)
    bench_url = database_url.rstrip("/") + "_bench" + os.environ.get("TOPOWEB_TEST_DB_SUFFIX", "")
    env = {
        **os.environ,
        "DATABASE_URL": bench_url,
        "DEBUG": "0",
        "SECRET_KEY": "bench-only",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "TOPOWEB_PLAIN_HTTP": "1",
        "TOPOWEB_INGEST_RATE": "100000/min",
        "TOPOWEB_QUERY_RATE": "10000000/min",
        "LOG_LEVEL": "WARNING",
        "STATICFILES_BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage",
        **settings,
    }
    _recreate_database(bench_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.cache import cache

    # The cache goes with the database it kept rows of: a token kept by an earlier run under
    # the same prefix (the scripts make them deterministically) would refuse this run's key.
    cache.clear()
    port = port or int(os.environ.get("BENCH_PORT", "0")) or _free_port()
    base = f"http://127.0.0.1:{port}"
    try:
        with gunicorn("topoweb.config.wsgi", port, workers, env, f"{base}/healthz"):
            yield base
    finally:
        from topoweb.config.celery_app import app

        app.control.purge()  # no worker ran: drop the analyses the script's ingests enqueued


@contextmanager
def gunicorn(app: str, port: int, workers: int, env: dict[str, str], probe: str) -> Iterator[None]:
    """gunicorn serving the WSGI `app` on loopback with sync workers, up once `probe` answers."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            app,
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        _wait_until_up(probe)
        yield
    finally:
        server.terminate()
        server.wait(timeout=20)


def sqlite_env(database: Path) -> dict[str, str]:
    """The environment of a throwaway topoweb on the SQLite file `database`, readable without
    signing in and with no Redis (the pages and screenshots need no worker)."""
    return os.environ | {
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": "",
        "TOPOWEB_PUBLIC_READ": "1",
        "DJANGO_SETTINGS_MODULE": "topoweb.config.settings",
        "DEBUG": "1",  # a development server, as `make run` starts it
    }


@contextmanager
def runserver(port: int, env: dict[str, str], probe: str = "/healthz") -> Iterator[str]:
    """Django's runserver on loopback; yields its base URL once `probe` answers."""
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base + probe)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


def request(url: str, token: str, body: bytes | None = None) -> int:
    """POST when a body is given, else GET; the status code, errors included."""
    req = urllib.request.Request(
        url,
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _recreate_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(probe: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(probe, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{probe} did not answer within 30 s")


def lua_string(text: str) -> str:
    """A Lua string literal of `text` (UTF-8): printable ASCII as is, every other byte as a
    decimal escape, which every Lua reads the same (JSON's \\u escapes are not Lua)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\' or not 32 <= byte < 127:
            out.append(f"\\{byte:03d}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def wrk(url: str, script: str, seconds: int, threads: int, connections: int) -> dict[str, Any]:
    """Debian's wrk against `url` for `seconds` with a Lua `script` whose `done` writes one line
    "WRK {json}": that JSON object, read back."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(script)
    try:
        out = subprocess.run(
            ["wrk", "-t", str(threads), "-c", str(connections), "-s", handle.name]
            + ["-d", f"{seconds}s", "--timeout", "10s", url],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        os.unlink(handle.name)
    line = next(x for x in out.splitlines() if x.startswith("WRK "))
    summary: dict[str, Any] = json.loads(line[4:])
    return summary
