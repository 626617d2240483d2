"""The baseline of bench/query.py: a bare Django REST framework APIView answering constant JSON.

A one-file Django project configured like `django-admin startproject` plus DRF: the default
middleware, DRF's default authentication and permission, DEBUG off, the same PostgreSQL in
DATABASE_URL, the JSON renderer only. It never touches the database: its throughput is what
the framework itself allows on this machine.
Served by gunicorn as `bench.bare_drf:application`."""

from __future__ import annotations

import os

import django
import environ
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="bench-only",
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "rest_framework",
        ],
        MIDDLEWARE=[
            "django.middleware.security.SecurityMiddleware",
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
            "django.middleware.clickjacking.XFrameOptionsMiddleware",
        ],
        DATABASES={
            "default": environ.Env.db_url_config(
                os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/topoweb")
            )
        },
        USE_TZ=True,
        REST_FRAMEWORK={
            "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
            "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
        },
    )
    django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

ANSWER = {"status": "ok", "items": [{"id": i, "name": f"item-{i}"} for i in range(4)]}


class Bare(APIView):
    """Constant JSON for GET and POST; a POST body is parsed (as DRF would) and ignored."""

    def get(self, request: Request) -> Response:
        return Response(ANSWER)

    def post(self, request: Request) -> Response:
        _ = request.data
        return Response(ANSWER)


urlpatterns = [path("bare", Bare.as_view())]
application = get_wsgi_application()
