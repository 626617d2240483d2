"""The compose stack without Docker: each service's command (web, each queue's worker, beat) run
as docker-compose.yml writes it, in the environment it gives, over the test PostgreSQL and Redis
(reached through relays the tests can cut). Only the addresses differ from a container (the
databases' host names, the bind address, two web workers), and the settings module is tested as
production imports it."""

from __future__ import annotations

import glob
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from tests.web import live
from tests.web.test_deploy_files import REQUIRED, ROOT, VENV_BIN, services
from topoweb.config.celery_app import app as celery_app
from topoweb.fleet.access import create_api_token

pytestmark = pytest.mark.django_db(transaction=True)

LATENCY = "django_http_requests_latency_seconds_by_view_method_count"


def service_env(name: str, **overrides: str) -> dict[str, str]:
    """The service's environment as compose gives it, with the programs of this checkout's
    virtualenv on PATH (the image's `python`, `gunicorn` and `celery`)."""
    return {
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        **services()[name]["environment"],
        **overrides,
    }


def pids_under(pid: int) -> list[int]:
    found = [pid]
    for child in live.children(pid):
        found += pids_under(child)
    return found


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@contextmanager
def started(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A service's command in its own session, stopped (the whole group) at the end."""
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def relays() -> tuple[live.TcpProxy, live.TcpProxy, str, str]:
    params = settings.DATABASES["default"]
    database = live.TcpProxy((params["HOST"] or "127.0.0.1", int(params["PORT"] or 5432)))
    redis_url = urlsplit(settings.REDIS_URL)
    redis = live.TcpProxy((redis_url.hostname or "127.0.0.1", redis_url.port or 6379))
    database_url = f"postgres://{params['USER']}@127.0.0.1:{database.port}/{params['NAME']}"
    return database, redis, database_url, f"redis://127.0.0.1:{redis.port}{redis_url.path}"


@pytest.fixture(scope="module")
def web(django_db_setup: None, tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    """compose's web command (migrate, then gunicorn with the project's config), two workers."""
    database, redis, database_url, redis_url = relays()
    port = live.free_port()
    tmp = tmp_path_factory.mktemp("web")
    env = service_env(
        "web",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        TOPOWEB_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY="2",
        TMPDIR=str(tmp),  # where gunicorn.py makes its metrics directory
        # The image runs collectstatic at build; here the sign-in page's static URLs are plain.
        STATICFILES_BACKEND="django.contrib.staticfiles.storage.StaticFilesStorage",
    )
    argv = shlex.split(services()["web"]["command"])
    assert argv[:2] == ["sh", "-c"]
    base = f"http://127.0.0.1:{port}"
    with started(argv, env) as shell:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert shell.poll() is None, "the web command exited"
            try:
                if live.call(f"{base}/healthz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            raise AssertionError("the web command did not serve /healthz within 180 s")
        # sh's child (the shell's own command line names gunicorn too), the workers' parent.
        (master,) = [pid for pid in pids_under(shell.pid)[1:] if "gunicorn" in cmdline(pid)][:1]
        yield {"base": base, "master": master, "tmp": tmp, "database": database, "redis": redis}
    database.down()
    redis.down()


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body, _ = live.call(f"{base}/metrics", REQUIRED["TOPOWEB_METRICS_TOKEN"])
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_metrics_answer_only_with_the_compose_token(web: dict[str, Any]) -> None:
    base = web["base"]
    assert live.call(f"{base}/metrics")[0] == 401
    assert live.call(f"{base}/metrics", "not-the-token")[0] == 401
    assert live.call(f"{base}/metrics", REQUIRED["TOPOWEB_METRICS_TOKEN"])[0] == 200


def test_metrics_are_summed_over_both_gunicorn_workers(web: dict[str, Any]) -> None:
    base = web["base"]
    token = create_api_token("scraper-stack")
    route = (LATENCY, (("method", "GET"), ("view", "api:server-list")))
    before = scrape(base).get(route, 0)

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: live.call(f"{base}/api/v1/servers/", token)[0], range(40)))

    assert codes == [200] * 40
    # Whichever worker answers a scrape, it counts every worker's requests.
    assert [scrape(base)[route] - before for _ in range(8)] == [40] * 8
    workers = set(live.children(web["master"]))
    assert len(workers) == 2
    written = glob.glob(str(web["tmp"] / "topoweb-prometheus-*" / "histogram_*.db"))
    assert workers <= {int(Path(path).stem.rpartition("_")[2]) for path in written}


def test_healthz_answers_while_the_database_is_down_and_readyz_does_not(
    web: dict[str, Any],
) -> None:
    base, database = web["base"], web["database"]
    assert [live.call(f"{base}/{probe}")[0] for probe in ("healthz", "readyz")] == [200, 200]

    database.down()
    try:
        alive = [live.call(f"{base}/healthz")[0] for _ in range(4)]
        ready = [live.call(f"{base}/readyz") for _ in range(4)]
    finally:
        database.up()

    assert alive == [200] * 4
    assert [status for status, _, _ in ready] == [503] * 4
    assert all(b'"database"' in body and b'"redis"' not in body for _, body, _ in ready)
    # Back up: ready again at once, whichever worker answers (a connection that broke during
    # the outage is replaced, not reported).
    assert [live.call(f"{base}/readyz")[0] for _ in range(6)] == [200] * 6


def test_readyz_fails_while_redis_is_down(web: dict[str, Any]) -> None:
    base, redis = web["base"], web["redis"]

    redis.down()
    try:
        alive = live.call(f"{base}/healthz")[0]
        status, body, _ = live.call(f"{base}/readyz")
    finally:
        redis.up()

    assert (alive, status) == (200, 503)
    assert b'"redis"' in body and b'"database"' not in body
    assert [live.call(f"{base}/readyz")[0] for _ in range(4)] == [200] * 4


def test_the_stack_sends_secure_cookies_and_hsts_behind_its_tls_proxy(
    web: dict[str, Any],
) -> None:
    status, _, headers = live.call(
        f"{web['base']}/accounts/login/", headers={"X-Forwarded-Proto": "https"}
    )

    assert status == 200
    assert "Secure" in headers["Set-Cookie"] and "csrftoken=" in headers["Set-Cookie"]
    assert headers["Strict-Transport-Security"].startswith("max-age=31536000")


# ---------------------------------------------------------------- workers


@pytest.mark.parametrize(
    ("service", "queue"), [("worker", "default"), ("worker-analysis", "analysis")]
)
def test_each_queues_worker_starts_and_answers_its_own_healthcheck(
    service: str, queue: str
) -> None:
    env = service_env(service, DATABASE_URL=live.database_url(), REDIS_URL=settings.REDIS_URL)
    check = services()[service]["healthcheck"]["test"]
    assert check[0] == "CMD-SHELL"

    def healthy() -> bool:
        ran = subprocess.run(["sh", "-c", check[1]], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        return ran.returncode == 0

    assert not healthy()  # nothing answers before the worker runs
    with started(shlex.split(services()[service]["command"]), env):
        assert live_wait(healthy, timeout=120)
        # It consumes its own queue and no other (asked of this worker by its node name).
        node = f"{queue}@{socket.gethostname()}"
        asked = subprocess.run(
            ["celery", "-A", "topoweb.config", "inspect", "active_queues", "--json",
             "--timeout", "10", "--destination", node],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert asked.returncode == 0, asked.stderr[-2000:]
    answers = json.loads(asked.stdout)
    assert [q["name"] for q in answers[node]] == [queue]


# ---------------------------------------------------------------- beat


def run_beat_healthcheck(schedule: Path, every_s: str) -> subprocess.CompletedProcess[str]:
    probe = services()["beat"]["healthcheck"]["test"]
    assert probe[:3] == ["CMD", "python", "-c"]
    return subprocess.run(
        [sys.executable, "-c", probe[3].replace("/tmp/celerybeat-schedule", str(schedule))],
        env={"PATH": os.environ["PATH"], "TOPOWEB_SWEEP_EVERY_S": every_s},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def newest_mtime(schedule: Path) -> float:
    return max((os.stat(p).st_mtime for p in glob.glob(f"{schedule}*")), default=0.0)


def test_beats_healthcheck_follows_the_age_of_the_schedule_file_it_keeps_writing(
    tmp_path: Path,
) -> None:
    schedule = tmp_path / "celerybeat-schedule"
    argv = [
        str(schedule) if arg == "/tmp/celerybeat-schedule" else arg
        for arg in shlex.split(services()["beat"]["command"])
    ]
    assert str(schedule) in argv
    env = service_env(
        "beat",
        DATABASE_URL=live.database_url(),
        REDIS_URL=settings.REDIS_URL,
        TOPOWEB_SWEEP_EVERY_S="1",
    )
    assert run_beat_healthcheck(schedule, "1").returncode != 0  # no file yet

    try:
        with started(argv, env):
            first = live_wait(lambda: newest_mtime(schedule), timeout=60)
            # Each sweep beat sends rewrites the file.
            live_wait(lambda: newest_mtime(schedule) > first + 0.5, timeout=30)
            healthy = run_beat_healthcheck(schedule, "1")
    finally:
        celery_app.control.purge()  # the sweeps beat sent: no worker of this test runs them

    assert healthy.returncode == 0, healthy.stderr
    stale = time.time() - 40  # older than three sweeps of 1 s plus 30 s
    for path in glob.glob(f"{schedule}*"):
        os.utime(path, (stale, stale))
    stuck = run_beat_healthcheck(schedule, "1")
    assert stuck.returncode != 0 and "schedule file age" in stuck.stderr
    # With the default sweep (60 s), the same file is still young enough.
    assert run_beat_healthcheck(schedule, "").returncode == 0


def live_wait(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


# ---------------------------------------------------------------- settings


def import_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    probe = (
        "import json, topoweb.config.settings as s; print(json.dumps({"
        "'DEBUG': s.DEBUG, 'SESSION_COOKIE_SECURE': getattr(s, 'SESSION_COOKIE_SECURE', False),"
        "'CSRF_COOKIE_SECURE': getattr(s, 'CSRF_COOKIE_SECURE', False),"
        "'SECURE_HSTS_SECONDS': getattr(s, 'SECURE_HSTS_SECONDS', 0),"
        "'SECURE_PROXY_SSL_HEADER': getattr(s, 'SECURE_PROXY_SSL_HEADER', None)}))"
    )
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {"SECRET_KEY": "k", "ALLOWED_HOSTS": "topoweb.example.org"}


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS"])
def test_production_settings_refuse_to_start_without_a_key_or_hosts(missing: str) -> None:
    given = {name: value for name, value in PRODUCTION.items() if name != missing}

    refused = import_settings(given)

    assert refused.returncode != 0
    assert f"ImproperlyConfigured: {missing} must be set when DEBUG is off" in refused.stderr


def test_production_settings_default_to_debug_off_secure_cookies_and_hsts() -> None:
    imported = import_settings(PRODUCTION)

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == (
        '{"DEBUG": false, "SESSION_COOKIE_SECURE": true, "CSRF_COOKIE_SECURE": true, '
        '"SECURE_HSTS_SECONDS": 31536000, "SECURE_PROXY_SSL_HEADER": '
        '["HTTP_X_FORWARDED_PROTO", "https"]}'
    )


@pytest.mark.parametrize(
    "env", [PRODUCTION | {"TOPOWEB_PLAIN_HTTP": "1"}, {"DEBUG": "1"}], ids=["plain-http", "debug"]
)
def test_only_an_explicit_plain_http_or_debug_drops_secure_cookies_and_hsts(
    env: dict[str, str],
) -> None:
    imported = import_settings(env)

    assert imported.returncode == 0, imported.stderr
    debug = "true" if env.get("DEBUG") else "false"
    assert imported.stdout.strip() == (
        f'{{"DEBUG": {debug}, "SESSION_COOKIE_SECURE": false, "CSRF_COOKIE_SECURE": false, '
        '"SECURE_HSTS_SECONDS": 0, "SECURE_PROXY_SSL_HEADER": null}'
    )


def test_make_run_asks_for_the_development_settings_explicitly() -> None:
    # `make -p` prints the variables make would give `run` (nothing is run); the Makefile
    # exports it to the commands (the manage.py in them reads it from the environment).
    printed = subprocess.run(
        ["make", "-pn", "run"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert "run: DEBUG := 1" in printed
    assert "run: export DEBUG := 1" in (ROOT / "Makefile").read_text(encoding="utf-8")
