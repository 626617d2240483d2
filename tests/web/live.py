"""Real processes for the fault tests: gunicorn (with the project's gunicorn settings) and a
Celery worker, started over the test database and the test Redis, in this helper's port range.
Only processes started here are signalled, by their ids."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent.parent
PORTS = range(int(os.environ.get("TOPOWEB_TEST_PORT_FIRST", "18180")), 18200)
METRICS_TOKEN = "metrics-token-for-the-fault-tests"


def database_url() -> str:
    """The test database (the one pytest-django created), as a URL for another process."""
    params = connection.settings_dict
    auth = params["USER"] + (f":{params['PASSWORD']}" if params["PASSWORD"] else "")
    where = f"{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}"
    return f"postgres://{auth}@{where}/{params['NAME']}"


def environment(**overrides: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "topoweb.config.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DEBUG": "0",
        "SECRET_KEY": "fault-tests-only",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "TOPOWEB_PLAIN_HTTP": "1",
        "STATICFILES_BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage",
        "TOPOWEB_METRICS_TOKEN": METRICS_TOKEN,
        "LOG_LEVEL": "ERROR",
    }
    env.update(overrides)
    return env


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports of the range (each held until all are found)."""
    held: list[socket.socket] = []
    try:
        for port in PORTS:
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            if len(held) == count:
                return [s.getsockname()[1] for s in held]
    finally:
        for sock in held:
            sock.close()
    raise RuntimeError(f"not {count} free ports in {PORTS}")


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS}")


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(t) for t in text]
    return found


@contextmanager
def gunicorn(
    workers: int = 2, port: int | None = None, **overrides: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The base URL of a gunicorn serving topoweb, and its master process."""
    port = port or free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "python:topoweb.config.gunicorn",
            "topoweb.config.wsgi:application",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--access-logfile",
            "/dev/null",
            "--log-level",
            "error",
            "--timeout",
            "60",
        ],
        cwd=ROOT,
        env=environment(**overrides),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, workers, process.pid)
        yield base, process
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_until_up(base: str, workers: int, master: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(children(master)) >= workers:
            try:
                urllib.request.urlopen(f"{base}/metrics", timeout=2).read()
            except urllib.error.HTTPError:
                return  # it answers (401 without the token)
            except OSError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"gunicorn at {base} did not come up within {timeout} s")


@contextmanager
def celery_worker(queue: str, **overrides: str) -> Iterator[subprocess.Popen[bytes]]:
    """A prefork worker with one child, consuming `queue` only (the session's own worker
    thread consumes the default queue)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "topoweb.config",
            "worker",
            "-Q",
            queue,
            "-c",
            "1",
            "--pool",
            "prefork",
            "-n",
            f"{queue}@%h",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "WARNING",
        ],
        cwd=ROOT,
        env=environment(**overrides),
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def call(
    url: str,
    token: str | None = None,
    body: Any = None,
    method: str | None = None,
    timeout: float = 60,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    """Status, body and headers of one request (JSON body when given)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **(headers or {})}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(), dict(exc.headers)


class TcpProxy:
    """A TCP relay on a local port to a real service (PostgreSQL, Redis), which the test can
    take down (every connection cut, new ones refused) and bring back on the same port: the
    service really goes away for whoever talks through the relay, and for nobody else."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self.lock:
            if self.listener is not None:
                # shutdown wakes the thread blocked in accept(); close alone would not.
                try:
                    self.listener.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.listener.close()
                self.listener = None
            for sock in self.open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self.open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                if self.listener is not listener:  # taken down meanwhile
                    client.close()
                    upstream.close()
                    return
                self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
