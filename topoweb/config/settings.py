"""topoweb settings: one module, driven by the environment.

Production is the default (DEBUG off; SECRET_KEY and ALLOWED_HOSTS required; secure cookies and
HSTS). DEBUG=1 gives the development defaults `make run` uses: SQLite, Celery eager when
REDIS_URL is unset, a local key and hosts, plain HTTP."""

import warnings
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured
from kombu.entity import Queue

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

# Production is the default: DEBUG off, and no start without SECRET_KEY and ALLOWED_HOSTS
# (a deploy that forgets one must not serve tracebacks or sign with a known key). `make run`
# and the development scripts set DEBUG=1, which brings the local defaults below.
DEBUG = env.bool("DEBUG", default=False)
if DEBUG:
    SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
else:
    for _required in ("SECRET_KEY", "ALLOWED_HOSTS"):
        if not env.str(_required, default=""):
            raise ImproperlyConfigured(
                f"{_required} must be set when DEBUG is off (production); "
                "set DEBUG=1 for a development server"
            )
    SECRET_KEY = env.str("SECRET_KEY")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# Production is served over HTTPS, by a TLS-terminating proxy in front of gunicorn (which
# speaks plain HTTP): cookies travel only over HTTPS, browsers are told to keep to HTTPS
# (HSTS), and the proxy's X-Forwarded-Proto says whether a request came in over TLS (the proxy
# must set it, overwriting what a client sent). Only an explicit TOPOWEB_PLAIN_HTTP=1 (or
# DEBUG) turns this off, for a deployment reached over plain HTTP.
TOPOWEB_PLAIN_HTTP = env.bool("TOPOWEB_PLAIN_HTTP", default=DEBUG)
if not TOPOWEB_PLAIN_HTTP:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("TOPOWEB_HSTS_SECONDS", default=365 * 24 * 3600)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "rest_framework_api_key",  # the fleet's collector and API tokens are its keys
    "topoweb.fleet",
    "topoweb.analysis",
    "topoweb.health",
    "topoweb.ui",
]

MIDDLEWARE = [
    "topoweb.config.probes.ProbeMiddleware",
    "topoweb.config.metrics.HttpMetricsMiddleware",  # a request's time through all the rest
    "topoweb.config.api.NulInPathMiddleware",
    "topoweb.config.api.ApiTrailingSlashMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "topoweb.fleet.access.AuditContextMiddleware",  # who makes a token, for the audit trail
    "topoweb.config.api.PageMessagesMiddleware",  # Django's MessageMiddleware, off the API
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "topoweb.ui.middleware.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "topoweb.config.urls"
WSGI_APPLICATION = "topoweb.config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
# Each worker keeps its connection between requests: opening one per request costs PostgreSQL
# a new backend process, more than the queries themselves. A connection that broke (database
# restarted) fails one request and is then replaced; CONN_HEALTH_CHECKS=1 checks each one
# before reuse instead, at the price of a round trip per request.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=300)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("CONN_HEALTH_CHECKS", default=False)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool(
    "TOPOWEB_PREPARED_STATEMENTS", default=True
):
    # PostgreSQL can spend longer planning a scheduler's short query than running it. Bound
    # on the server, psycopg prepares a query text after it ran
    # `prepare_threshold` times on a connection, and PostgreSQL then reuses its plan: with
    # persistent connections (CONN_MAX_AGE) every hot query is planned a few times per worker,
    # not per request. Django leaves both off by default. Turn them off
    # (TOPOWEB_PREPARED_STATEMENTS=0) behind a pooler in transaction mode (PgBouncer < 1.21),
    # where a prepared statement may not exist on the next transaction's server connection.
    # SQLite prepares on its own: nothing to set there.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"server_side_binding": True, "prepare_threshold": 5}
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process and a worker may write at once: WAL plus IMMEDIATE transactions avoid
    # "database is locked" on the embedded default.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Where `collectstatic` gathers the files whitenoise serves when DEBUG is off.
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
# The dashboard's own modules and styles, plus exactly the library files it loads from
# frontend/node_modules (installed by `npm ci --prefix frontend`), served under vendor/.
STATICFILES_DIRS = [
    ("ui/src", BASE_DIR / "frontend" / "src"),
    ("ui/css", BASE_DIR / "frontend" / "css"),
]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "topoweb.ui.staticfinders.VendorFinder",
]
LOGIN_URL = "login"
# --- company sign-in (OpenID Connect, mozilla-django-oidc; topoweb/fleet/oidc.py) -------------
TOPOWEB_OIDC = env.bool("TOPOWEB_OIDC", default=False)
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
# The provider's groups claim, and which of its groups give which permission (comma lists).
TOPOWEB_OIDC_GROUPS_CLAIM = env.str("TOPOWEB_OIDC_GROUPS_CLAIM", default="groups")
TOPOWEB_OIDC_VIEW_GROUPS = env.list("TOPOWEB_OIDC_VIEW_GROUPS", default=[])
TOPOWEB_OIDC_UPLOAD_GROUPS = env.list("TOPOWEB_OIDC_UPLOAD_GROUPS", default=[])
TOPOWEB_OIDC_ADMIN_GROUPS = env.list("TOPOWEB_OIDC_ADMIN_GROUPS", default=[])
if TOPOWEB_OIDC:
    AUTHENTICATION_BACKENDS.insert(0, "topoweb.fleet.oidc.CompanySignIn")
    OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = env.str("OIDC_RP_CLIENT_SECRET")
    OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT")
    OIDC_RP_SIGN_ALGO = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
    OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile")
    OIDC_USE_PKCE = env.bool("OIDC_USE_PKCE", default=True)
    LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?company=refused"
LOGIN_REDIRECT_URL = "ui:fleet"
LOGOUT_REDIRECT_URL = "ui:fleet"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": env.str(
            "STATICFILES_BACKEND",
            default="whitenoise.storage.CompressedManifestStaticFilesStorage"
            if not DEBUG
            else "django.contrib.staticfiles.storage.StaticFilesStorage",
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG
if DEBUG:
    # Development serves from the finders; STATIC_ROOT exists only after collectstatic.
    warnings.filterwarnings("ignore", message="No directory at", module="whitenoise.base")

# --- Celery -------------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
CELERY_BROKER_URL = REDIS_URL or "memory://"
# Two queues, each with its own worker in production (docker-compose.yml): a class's analysis
# can run for minutes and must not hold up the light health evaluations and sweeps.
ANALYSIS_QUEUE = "analysis"
DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = (Queue(DEFAULT_QUEUE), Queue(ANALYSIS_QUEUE))  # type: ignore[no-untyped-call]
CELERY_TASK_DEFAULT_QUEUE = DEFAULT_QUEUE
CELERY_TASK_ROUTES = {
    "analysis.run": {"queue": ANALYSIS_QUEUE},
    "fleet.analyse_fabric": {"queue": ANALYSIS_QUEUE},  # a large fabric takes seconds
}
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL  # the embedded default needs no broker
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the message to be redelivered
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A message a worker took but never acknowledged (its host died with it) is handed out again
# after this long. Above the longest a message may wait unacknowledged in a live worker: a
# retry's countdown (at most 300 s of backoff) plus the task's time limit (150 s).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("TOPOWEB_VISIBILITY_TIMEOUT_S", default=600)
}
# A broker that is down must not hold an ingest request for long: the sweep resends later.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
CELERY_BEAT_SCHEDULE = {
    "analysis-sweep": {
        "task": "analysis.sweep",
        "schedule": env.float("TOPOWEB_SWEEP_EVERY_S", default=60.0),
    },
    "health-sweep": {
        "task": "health.sweep",
        "schedule": env.float("TOPOWEB_SWEEP_EVERY_S", default=60.0),
    },
    "fabric-sweep": {
        "task": "fleet.sweep_fabrics",
        "schedule": env.float("TOPOWEB_SWEEP_EVERY_S", default=60.0),
    },
    "snapshot-prune": {
        "task": "fleet.prune_snapshots",
        "schedule": env.float("TOPOWEB_PRUNE_EVERY_S", default=3600.0),
    },
}
# Beat writes its schedule file after every task it sends: the file's age is its health check.
CELERY_BEAT_SYNC_EVERY = 1

# --- cache --------------------------------------------------------------------------------
# Throttle counters (shared by every gunicorn worker) and the analysis counts /metrics serves
# live here: Redis when configured (CACHE_URL, else REDIS_URL), per process otherwise.
CACHE_URL = env.str("CACHE_URL", default=REDIS_URL)
# Answers (config.answers) are also kept per process, in front of the shared cache: each is
# keyed by everything it depends on, so a process's copy is never stale, and a repeated
# question costs no round trip.
ANSWERS_CACHE: dict[str, Any] = {
    "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
    "LOCATION": "answers",
    # A few hot questions per process: an answer can be large (a big class's analysis text).
    "OPTIONS": {"MAX_ENTRIES": 128},
}
CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}
if CACHE_URL:
    CACHES = {
        "default": {
            # django-redis rather than Django's own RedisCache: it keeps one client per
            # process (Django's makes a new one on every call, which a request's few cache
            # calls paid for in CPU) and counts a throttle's `incr` in one round trip.
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": CACHE_URL,
            "KEY_PREFIX": "topoweb",
            # A Redis that is down must cost a request a second at most (throttles then
            # let requests through, see topoweb.config.api).
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        }
    }
CACHES["answers"] = ANSWERS_CACHE

# --- API ----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # The token scheme comes first so that anonymous requests get 401 with a Bearer challenge.
        "topoweb.fleet.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["topoweb.config.permissions.CanRead"],
    "DEFAULT_RENDERER_CLASSES": ["topoweb.config.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "topoweb.config.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "topoweb.config.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "topoweb API",
    "DESCRIPTION": "GPU server topologies, benchmarks and analyses of a fleet.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs pages are read like the API (config.permissions.may_read).
    "SERVE_PERMISSIONS": ["topoweb.config.permissions.CanRead"],
    "COMPONENT_SPLIT_REQUEST": True,
    # One name per choice set where several fields are called `kind`.
    "ENUM_NAME_OVERRIDES": {
        "FindingKindEnum": "topoweb.core.health.KINDS",
        "FigureKindEnum": ["p2p", "busbw"],
    },
    # The docs pages load Swagger UI and Redoc from this app's static files, never a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- topoweb ------------------------------------------------------------------------------
TOPOWEB_PUBLIC_READ = env.bool("TOPOWEB_PUBLIC_READ", default=False)
TOPOWEB_MAX_REPORT_BYTES = env.int("TOPOWEB_MAX_REPORT_BYTES", default=4 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = TOPOWEB_MAX_REPORT_BYTES + 1024 * 1024
# An ibnetdiscover capture sent as a file (a 10,000-host fabric prints tens of megabytes).
TOPOWEB_MAX_FABRIC_BYTES = env.int("TOPOWEB_MAX_FABRIC_BYTES", default=64 * 1024 * 1024)
# Bounded work (topoweb.config.limits): past the largest real machines, refused with 413.
TOPOWEB_MAX_GPUS = env.int("TOPOWEB_MAX_GPUS", default=576)
TOPOWEB_MAX_DEVICES = env.int("TOPOWEB_MAX_DEVICES", default=640)
TOPOWEB_MAX_BENCHMARK_BYTES = env.int("TOPOWEB_MAX_BENCHMARK_BYTES", default=256 * 1024)
TOPOWEB_MAX_BENCHMARK_ROWS = env.int("TOPOWEB_MAX_BENCHMARK_ROWS", default=1000)
TOPOWEB_MAX_BENCHMARKS_PER_REPORT = env.int("TOPOWEB_MAX_BENCHMARKS_PER_REPORT", default=32)
TOPOWEB_MAX_QUERY_GPUS = env.int("TOPOWEB_MAX_QUERY_GPUS", default=256)
# How long an answer to a question (placement, selection, serving) is kept in the cache; its
# key names everything it depends on, so this only bounds the space (config/answers.py).
TOPOWEB_ANSWER_CACHE_S = env.int("TOPOWEB_ANSWER_CACHE_S", default=24 * 3600)
TOPOWEB_MAX_SELECT_GPUS = env.int("TOPOWEB_MAX_SELECT_GPUS", default=576)
# /metrics answers only with `Authorization: Bearer <this>`; unset, it is not served on the
# application's address (`manage.py serve_metrics` serves it on an internal one).
TOPOWEB_METRICS_TOKEN = env.str("TOPOWEB_METRICS_TOKEN", default="")
# Retention: every snapshot that changed a server's wiring is kept, and its newest this many;
# the rest are pruned every TOPOWEB_PRUNE_EVERY_S (fleet.retention).
TOPOWEB_KEEP_SNAPSHOTS = env.int("TOPOWEB_KEEP_SNAPSHOTS", default=20)
# The fleet's one enrollment secret: a collector holding it gets its own host's collector token
# on first contact (POST /api/v1/enroll/). Unset, enrollment is off.
TOPOWEB_ENROLLMENT_TOKEN = env.str("TOPOWEB_ENROLLMENT_TOKEN", default="")
# A report captured further ahead of this server's clock is refused (400 naming captured_at).
TOPOWEB_MAX_CLOCK_SKEW_S = env.int("TOPOWEB_MAX_CLOCK_SKEW_S", default=300)
TOPOWEB_INGEST_RATE = env.str("TOPOWEB_INGEST_RATE", default="600/min")
# Cost, placement and selection questions run the cost model on each call.
TOPOWEB_QUERY_RATE = env.str("TOPOWEB_QUERY_RATE", default="600/min")
# Pending work is re-sent once it has waited this long (the broker was down when it was made).
TOPOWEB_SWEEP_PENDING_AFTER_S = env.int("TOPOWEB_SWEEP_PENDING_AFTER_S", default=300)
# A running analysis renews its heartbeat this often; one whose heartbeat is older than
# TOPOWEB_STALE_CLAIM_AFTER_S lost its worker and is taken over (by the redelivered message or
# the sweep): a killed worker's analysis is running again within about a minute or two.
TOPOWEB_ANALYSIS_HEARTBEAT_S = env.float("TOPOWEB_ANALYSIS_HEARTBEAT_S", default=10.0)
TOPOWEB_STALE_CLAIM_AFTER_S = env.int("TOPOWEB_STALE_CLAIM_AFTER_S", default=45)
# A server whose collector reported once gets the collector_silent finding (and metric) when
# this many reports in a row, expected every TOPOWEB_COLLECTOR_INTERVAL_S (the collector's
# --interval), are overdue; the health sweep (every TOPOWEB_SWEEP_EVERY_S) marks and clears it.
TOPOWEB_COLLECTOR_INTERVAL_S = env.float("TOPOWEB_COLLECTOR_INTERVAL_S", default=3600.0)
TOPOWEB_COLLECTOR_SILENT_AFTER = env.int("TOPOWEB_COLLECTOR_SILENT_AFTER", default=3)
# An analysis that hits its time limit (or loses its worker) this many times is marked failed.
TOPOWEB_ANALYSIS_MAX_ATTEMPTS = env.int("TOPOWEB_ANALYSIS_MAX_ATTEMPTS", default=3)
# Any worker task (fleet.work): tries per object before it is given up with the reason, which
# the pages show; a message still queued after TOPOWEB_QUEUED_LOST_AFTER_S counts as lost.
TOPOWEB_TASK_MAX_ATTEMPTS = env.int("TOPOWEB_TASK_MAX_ATTEMPTS", default=3)
TOPOWEB_QUEUED_LOST_AFTER_S = env.int("TOPOWEB_QUEUED_LOST_AFTER_S", default=900)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # Without a broker every task runs inline: one "Task ... succeeded" line per ingest is
    # noise there (`make run` loads the demo fleet that way); a worker still logs them.
    "loggers": ({"celery.app.trace": {"level": "WARNING"}} if CELERY_TASK_ALWAYS_EAGER else {}),
}
