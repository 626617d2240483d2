"""The deployment files, checked without Docker, systemd or Kubernetes: docker-compose.yml's shape
and the commands it runs, the Dockerfile's COPY sources, the collector's unit and DaemonSet."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import environ
import pytest
import yaml
from celery.app.utils import find_app
from django.conf import settings
from django.core.management import get_commands

from collector.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent.parent
VENV_BIN = Path(sys.executable).parent
APP_SERVICES = ("web", "worker", "worker-analysis", "beat")  # the ones built from this repository
REQUIRED = {"SECRET_KEY": "compose-test-key", "TOPOWEB_METRICS_TOKEN": "compose-metrics-token"}


# ---------------------------------------------------------------- reading the files


class ComposeError(Exception):
    """What `docker compose` itself would refuse, e.g. a required variable left unset."""


_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR:?message}` substitution, on every string."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name", "op", "arg")
        found = env.get(name)
        missing = found is None or (found == "" and op is not None and op.startswith(":"))
        if op in (":-", "-") and missing:
            return str(arg)
        if op in (":?", "?") and missing:
            raise ComposeError(f"required variable {name} is missing a value: {arg}")
        return found or ""

    return _VARIABLE.sub(substitute, value)


def compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    document = yaml.safe_load(text)  # `<<: *app` merges are resolved by the loader
    return interpolate(document, REQUIRED if env is None else env)


def services() -> dict[str, Any]:
    return compose()["services"]


def command_parts(service: dict[str, Any]) -> list[list[str]]:
    """The argv of each program a service's command runs (`sh -c "a && b"` gives two)."""
    command = service["command"]
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:2] == ["sh", "-c"]:
        return [shlex.split(part) for part in argv[2].split("&&")]
    return [argv]


def dockerfile_instructions() -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    instructions: list[tuple[int, str, str]] = []
    pending = ""
    start = 0
    for number, line in enumerate(
        (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines(), 1
    ):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        start = start if pending else number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        instructions.append((start, keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def read_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit file: sections in order, each with its (key, value) lines."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: str | None = None
    logical = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not logical and (not line.strip() or line.lstrip()[0] in "#;"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical, line = "", logical + line
        if line.startswith("[") and line.rstrip().endswith("]"):
            current = line.strip()[1:-1]
            sections[current] = []
            continue
        key, equals, value = line.partition("=")
        assert equals and current, f"{path.name} line {number}: not `Key=value` in a section"
        sections[current].append((key.strip(), value.strip()))
    return sections


# ---------------------------------------------------------------- docker-compose.yml


def test_compose_runs_web_worker_beat_redis_and_postgres() -> None:
    assert sorted(services()) == ["beat", "postgres", "redis", "web", "worker", "worker-analysis"]


def test_web_worker_and_beat_run_from_one_image_built_from_this_repository() -> None:
    found = services()
    built = {(str(found[name].get("build")), found[name].get("image")) for name in APP_SERVICES}
    assert built == {(".", "topoweb:latest")}
    assert "build" not in found["redis"] and "build" not in found["postgres"]


def test_every_service_has_a_healthcheck_with_a_command_and_timings() -> None:
    for name, service in services().items():
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert {"interval", "timeout", "retries"} <= set(check), name


def test_the_app_services_start_only_after_postgres_and_redis_are_healthy() -> None:
    found = services()
    for name in APP_SERVICES:
        assert found[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }, name


def test_the_app_services_get_the_database_redis_and_secret_key_from_the_environment() -> None:
    found = services()
    for name in APP_SERVICES:
        assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"} <= set(found[name]["environment"]), name
    assert found["web"]["environment"]["SECRET_KEY"] == "compose-test-key"
    assert found["web"]["environment"]["DEBUG"] == "0"


@pytest.mark.parametrize("variable", sorted(REQUIRED))
def test_compose_refuses_to_start_without_a_secret_key_or_a_metrics_token(variable: str) -> None:
    with pytest.raises(ComposeError, match=variable):
        compose(env={name: value for name, value in REQUIRED.items() if name != variable})


def test_the_stack_is_production_shaped_unless_told_it_is_plain_http() -> None:
    found = services()
    for name in APP_SERVICES:
        environment = found[name]["environment"]
        assert environment["DEBUG"] == "0", name
        assert environment["TOPOWEB_PLAIN_HTTP"] == "0", name
        assert environment["TOPOWEB_METRICS_TOKEN"] == "compose-metrics-token", name
    plain = compose(REQUIRED | {"TOPOWEB_PLAIN_HTTP": "1"})["services"]["web"]["environment"]
    assert plain["TOPOWEB_PLAIN_HTTP"] == "1"


def test_every_variable_compose_sets_is_one_the_settings_read() -> None:
    settings_text = (ROOT / "topoweb" / "config" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r"\benv(?:\.\w+)?\(\s*\"(\w+)\"", settings_text))
    for name in APP_SERVICES:
        unread = set(services()[name]["environment"]) - read
        assert not unread, f"{name} sets {sorted(unread)}, which settings.py never reads"


@pytest.mark.parametrize("password", [None, "s3cret"])
def test_the_database_url_reaches_the_postgres_service_with_its_credentials(
    password: str | None,
) -> None:
    env = REQUIRED | ({"POSTGRES_PASSWORD": password} if password else {})
    found = compose(env)["services"]
    database = environ.Env.db_url_config(found["web"]["environment"]["DATABASE_URL"])
    postgres = found["postgres"]["environment"]

    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["HOST"], database["PORT"]) == ("postgres", 5432)
    assert database["NAME"] == postgres["POSTGRES_DB"] == "topoweb"
    assert database["USER"] == postgres["POSTGRES_USER"] == "topoweb"
    assert database["PASSWORD"] == postgres["POSTGRES_PASSWORD"] == (password or "topoweb")
    assert found["postgres"]["healthcheck"]["test"][1:] == [
        "pg_isready", "-U", "topoweb", "-d", "topoweb"
    ]  # fmt: skip
    assert found["web"]["environment"]["REDIS_URL"] == "redis://redis:6379/0"


def test_gunicorn_and_celery_are_console_scripts_pinned_in_requirements() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith("#")
    )
    for program in ("gunicorn", "celery"):
        assert os.access(VENV_BIN / program, os.X_OK), f"{program} is not installed"
        assert importlib.metadata.version(program) == pins[program]


def test_web_migrates_then_serves_the_wsgi_application_with_the_projects_gunicorn_config() -> None:
    migrate, gunicorn = command_parts(services()["web"])
    assert migrate == ["python", "manage.py", "migrate", "--noinput"]
    assert (ROOT / "manage.py").is_file() and "migrate" in get_commands()
    assert gunicorn == [
        "gunicorn", "-c", "python:topoweb.config.gunicorn", "topoweb.config.wsgi:application"
    ]  # fmt: skip
    config = importlib.import_module("topoweb.config.gunicorn")
    assert config.bind == "0.0.0.0:8000"  # without TOPOWEB_BIND, as in compose
    assert services()["web"]["ports"] == ["8000:8000"]
    module, _, attribute = gunicorn[-1].partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


def test_the_wsgi_module_loads_every_view_and_freezes_what_it_loaded() -> None:
    # In a fresh interpreter: the views are imported at start, not on the first request, and
    # the garbage collector no longer walks what was loaded (config/wsgi.py says why).
    probe = (
        "import gc, sys; import topoweb.config.wsgi; "
        "print(gc.get_freeze_count(), 'topoweb.api.reads' in sys.modules, "
        "'topoweb.ui.views' in sys.modules)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    frozen, api_loaded, pages_loaded = ran.stdout.split()
    assert int(frozen) > 50_000 and api_loaded == pages_loaded == "True"


def test_gunicorn_accepts_the_web_command_and_loads_the_app_in_the_compose_environment() -> None:
    gunicorn = command_parts(services()["web"])[1]
    env = {"PATH": os.environ["PATH"], **services()["web"]["environment"]}

    # --check-config parses every option and imports the application, then exits.
    checked = subprocess.run(
        [str(VENV_BIN / "gunicorn"), "--check-config", *gunicorn[1:]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert checked.returncode == 0, checked.stderr[-2000:]


def test_worker_and_beat_run_celery_on_the_project_app() -> None:
    found = services()
    beat = command_parts(found["beat"])[0]
    assert beat[:4] == ["celery", "-A", "topoweb.config", "beat"]
    # One worker per queue, each consuming its queue alone and pinged by its own node name.
    for service, queue in (("worker", "default"), ("worker-analysis", "analysis")):
        worker = command_parts(found[service])[0]
        assert worker[:4] == ["celery", "-A", "topoweb.config", "worker"]
        assert f"--queues={queue}" in worker and f"--hostname={queue}@%h" in worker
        check = found[service]["healthcheck"]["test"]
        assert check[0] == "CMD-SHELL" and check[1].startswith("celery -A topoweb.config inspect")
        # As compose gives it (`$$` written): the shell asks this container's hostname.
        assert check[1].endswith(f"--destination {queue}@$(hostname)")
    queues = {q.name for q in settings.CELERY_TASK_QUEUES}
    assert queues == {"default", "analysis"}
    # Beat's healthcheck reads the age of the schedule file beat is told to write (run in
    # tests/web/test_deploy_stack.py).
    schedule = beat[beat.index("--schedule") + 1]
    assert found["beat"]["healthcheck"]["test"][:3] == ["CMD", "python", "-c"]
    assert f"glob.glob('{schedule}*')" in found["beat"]["healthcheck"]["test"][3]


def test_the_celery_app_has_the_tasks_and_a_beat_schedule_for_the_sweeps() -> None:
    app = find_app("topoweb.config")  # how `celery -A topoweb.config` finds it
    app.loader.import_default_modules()

    assert app.main == "topoweb"
    assert {"analysis.run", "analysis.sweep", "health.evaluate", "health.sweep"} <= set(app.tasks)
    assert sorted(entry["task"] for entry in app.conf.beat_schedule.values()) == [
        "analysis.sweep",
        "fleet.prune_snapshots",
        "fleet.sweep_fabrics",
        "health.sweep",
    ]


def test_the_celery_command_loads_the_app_in_the_compose_environment() -> None:
    env = {"PATH": os.environ["PATH"], **services()["worker"]["environment"]}

    report = subprocess.run(
        [str(VENV_BIN / "celery"), "-A", "topoweb.config", "report"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert report.returncode == 0, report.stderr[-2000:]
    assert "software -> celery:" in report.stdout


def run_web_probe(server_url: str, allowed_hosts: str) -> subprocess.CompletedProcess[str]:
    """The web healthcheck's own command, aimed at SERVER_URL instead of the container's :8000."""
    probe = services()["web"]["healthcheck"]["test"]
    assert probe[:3] == ["CMD", "python", "-c"]
    assert "http://127.0.0.1:8000/readyz" in probe[3]
    return subprocess.run(
        [sys.executable, "-c", probe[3].replace("http://127.0.0.1:8000", server_url)],
        env={"PATH": os.environ["PATH"], "ALLOWED_HOSTS": allowed_hosts},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "allowed_hosts", ["localhost,127.0.0.1", "topoweb.example.org", ".example.org,localhost", "*"]
)
def test_the_web_healthcheck_passes_whatever_public_name_allowed_hosts_gives(
    live_server: Any, settings: Any, allowed_hosts: str
) -> None:
    # The probes answer before the Host check: Kubernetes probes by the pod's address.
    settings.ALLOWED_HOSTS = allowed_hosts.split(",")  # as settings.py reads the same variable

    probe = run_web_probe(live_server.url, allowed_hosts)

    assert probe.returncode == 0, probe.stderr[-2000:]


@pytest.mark.django_db(transaction=True)
def test_the_web_healthcheck_fails_when_readyz_does_not_answer_200(
    live_server: Any, settings: Any
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there: not ready

    probe = run_web_probe(live_server.url, "localhost")

    assert probe.returncode != 0
    assert "HTTP Error 503" in probe.stderr


# ---------------------------------------------------------------- Dockerfile


def test_every_file_the_dockerfile_copies_from_the_repository_exists() -> None:
    copies = [
        (line, shlex.split(arguments))
        for line, keyword, arguments in dockerfile_instructions()
        if keyword in ("COPY", "ADD")
    ]
    assert copies, "the Dockerfile copies nothing"
    for line, argv in copies:
        if any(arg.startswith("--from=") for arg in argv):
            continue  # from an earlier build stage, not from the repository
        sources = [arg for arg in argv if not arg.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists() or list(ROOT.glob(source)), (
                f"Dockerfile line {line}: COPY source {source} is not in the repository"
            )


def test_the_image_serves_the_same_wsgi_application_by_default() -> None:
    (cmd,) = [args for _, keyword, args in dockerfile_instructions() if keyword == "CMD"]
    assert yaml.safe_load(cmd) == command_parts(services()["web"])[1]
    assert ("EXPOSE", "8000") in [(k, a) for _, k, a in dockerfile_instructions()]


def test_a_local_env_file_with_the_secrets_never_goes_into_the_image() -> None:
    # `COPY . .` sends the whole checkout; compose and settings.py both read `.env` from it.
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert ("COPY", ". .") in [(k, a) for _, k, a in dockerfile_instructions()]
    assert ".env" in [line.strip() for line in ignored]


# ---------------------------------------------------------------- collector deployment

COLLECTOR_SCRIPT = "topoweb-collector"
KUBERNETES = ROOT / "deploy" / "kubernetes"


def collector_project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "collector" / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_collector_wheel_declares_its_console_script_and_the_pinned_binding() -> None:
    project = collector_project()["project"]
    assert project["scripts"] == {COLLECTOR_SCRIPT: "collector.cli:main"}
    pinned = [
        line.strip()
        for line in (ROOT / "collector" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert project["dependencies"] == pinned


def test_the_systemd_service_runs_the_installed_script_once_with_options_it_accepts() -> None:
    unit = read_unit(ROOT / "collector" / "deploy" / "topoweb-collector.service")
    assert list(unit) == ["Unit", "Service"]  # started by its timer, not at boot on its own
    service = dict(unit["Service"])
    assert service["Type"] == "oneshot"
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == f"/opt/topoweb-collector/bin/{COLLECTOR_SCRIPT}"  # the wheel's script

    # systemd's specifiers: %d the credentials directory, %S the state directory root.
    args = [
        arg.replace("%d", "/run/credentials/topoweb-collector.service").replace("%S", "/var/lib")
        for arg in argv[1:]
    ]
    options = build_parser().parse_args(args)
    assert options.once and options.interval is None
    assert service["LoadCredential"].split(":")[0] == options.token_file.name == "token"
    assert options.spool_dir == Path("/var/lib") / service["StateDirectory"] / "spool"
    assert "PYTHONPATH" not in service.get("Environment", "")


def test_the_timer_starts_it_hourly_at_a_random_minute_per_host(settings: Any) -> None:
    timer = read_unit(ROOT / "collector" / "deploy" / "topoweb-collector.timer")
    entries = dict(timer["Timer"])
    # Hourly, as the server expects reports by default (collector_silent counts from it).
    assert entries["OnCalendar"] == "hourly"
    assert settings.TOPOWEB_COLLECTOR_INTERVAL_S == 3600
    assert entries["RandomizedDelaySec"] == "3600" and entries["FixedRandomDelay"] == "yes"
    assert dict(timer["Install"])["WantedBy"] == "timers.target"


SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"  # Debian's systemd (`make test` installs it)


def test_systemd_reads_every_line_of_the_service_and_the_timer(tmp_path: Path) -> None:
    """`systemd-analyze verify` loads both units as systemd would and names any key it does not
    know, any value it cannot read (it still exits 0 for those: the output must be empty). It
    runs in a root of its own: systemd's units, these two, and the wheel's script in place."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    for name in ("topoweb-collector.service", "topoweb-collector.timer"):
        shutil.copy(ROOT / "collector" / "deploy" / name, units / name)
    script = root / "opt/topoweb-collector/bin" / COLLECTOR_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)

    verified = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", f"--root={root}",
         str(units / "topoweb-collector.service"), str(units / "topoweb-collector.timer")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")


def test_the_collector_image_installs_the_wheel_and_runs_its_script_as_nobody() -> None:
    dockerfile = ROOT / "collector" / "Dockerfile"
    text = dockerfile.read_text(encoding="utf-8")
    instructions = [
        line.split(None, 1) for line in text.splitlines() if line and not line.startswith("#")
    ]
    copies = [args for keyword, args in instructions if keyword == "COPY" and "--from" not in args]
    assert copies == [". collector/"]  # the build context is collector/ itself
    assert "pip wheel --no-cache-dir --no-deps ./collector -w /wheels" in text
    assert "pip install --no-cache-dir /wheels/*.whl" in text
    (user,) = [args for keyword, args in instructions if keyword == "USER"]
    assert user == "65534:65534"
    (entrypoint,) = [args for keyword, args in instructions if keyword == "ENTRYPOINT"]
    assert yaml.safe_load(entrypoint) == [COLLECTOR_SCRIPT]
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in text


def kubernetes_documents() -> list[tuple[str, dict[str, Any]]]:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    assert sorted(listed) == sorted(
        p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    return [
        (name, document)
        for name in listed
        for document in yaml.safe_load_all((KUBERNETES / name).read_text(encoding="utf-8"))
    ]


def test_every_kubernetes_manifest_validates_against_the_api_schema() -> None:
    checked = subprocess.run(
        [str(VENV_BIN / "kubernetes-validate"), "--strict", "-k", "1.30.0",
         *[str(KUBERNETES / name) for name in yaml.safe_load(
             (KUBERNETES / "kustomization.yaml").read_text())["resources"]]],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for _, d in kubernetes_documents())
    assert kinds == [
        "ConfigMap/topoweb-config",
        "DaemonSet/topoweb-collector",
        "Deployment/topoweb-beat",
        "Deployment/topoweb-web",
        "Deployment/topoweb-worker",
        "Deployment/topoweb-worker-analysis",
        "Namespace/topoweb",
        "Service/topoweb-web",
    ]


def test_kubernetes_runs_the_same_commands_and_probes_as_compose() -> None:
    found = {d["metadata"]["name"]: d for _, d in kubernetes_documents() if d["kind"] != "Service"}
    web = found["topoweb-web"]["spec"]["template"]["spec"]
    (migrate,), (gunicorn,) = web["initContainers"], web["containers"]
    assert [migrate["command"], gunicorn["command"]] == command_parts(services()["web"])
    assert gunicorn["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gunicorn["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for name, queue in (("topoweb-worker", "default"), ("topoweb-worker-analysis", "analysis")):
        (worker,) = found[name]["spec"]["template"]["spec"]["containers"]
        assert worker["command"][:4] == ["celery", "-A", "topoweb.config", "worker"]
        assert f"--queues={queue}" in worker["command"]
    (beat,) = found["topoweb-beat"]["spec"]["template"]["spec"]["containers"]
    compose_beat = services()["beat"]
    assert beat["command"] == shlex.split(compose_beat["command"])
    assert beat["livenessProbe"]["exec"]["command"] == compose_beat["healthcheck"]["test"][1:]
    assert found["topoweb-beat"]["spec"]["replicas"] == 1
    # The pods run as the image's own user, whose id the Dockerfile fixes.
    (useradd,) = [a for _, k, a in dockerfile_instructions() if k == "RUN" and "useradd" in a]
    uid = int(shlex.split(useradd)[shlex.split(useradd).index("--uid") + 1])
    for name in ("topoweb-web", "topoweb-worker", "topoweb-worker-analysis", "topoweb-beat"):
        assert found[name]["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == uid


def test_the_daemonset_runs_non_root_with_only_nvidias_management_devices() -> None:
    document = dict(kubernetes_documents())["collector.yaml"]
    pod = document["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65534
    (container,) = pod["containers"]
    assert container["command"] == [COLLECTOR_SCRIPT]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]} and security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    # No GPU reserved, no /dev mounted: the NVIDIA runtime gives the management devices only.
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert pod["runtimeClassName"] == "nvidia"
    env = {item["name"]: item for item in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert all("/dev" not in v.get("hostPath", {}).get("path", "") for v in pod["volumes"])
    # The init container only hands the node's state directory to that user.
    (init,) = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}


def test_the_daemonset_enrolls_each_node_with_the_one_enrollment_secret() -> None:
    document = dict(kubernetes_documents())["collector.yaml"]
    pod = document["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["TOPOWEB_HOSTNAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    options = build_parser().parse_args(container["args"])
    assert options.server.startswith("https://")
    assert options.interval == 3600  # the loop's own jitter spreads the fleet
    mounts = {m["name"]: Path(m["mountPath"]) for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # One Secret for every node, not one per node.
    assert volumes["enrollment"]["secret"]["secretName"] == "topoweb-collector-enrollment"
    assert options.enroll_token_file == mounts["enrollment"] / "token"
    # The host's own token and its spool live on the node, and survive the pod.
    assert (
        options.token_file.parent == mounts["state"]
        and mounts["state"] in options.spool_dir.parents
    )
    assert volumes["state"]["hostPath"]["path"] == str(mounts["state"])
