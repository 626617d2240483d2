"""A real OpenID Connect provider for the company sign-in tests: django-oauth-toolkit's OIDC
on its own SQLite file, in its own process (tests/oidc_provider/serve.py). Nothing of topoweb."""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECRET_KEY = "oidc-provider-for-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["OIDC_PROVIDER_DB"]}
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["OIDC_PROVIDER_RSA_KEY"],
    "SCOPES": {"openid": "OpenID Connect", "email": "email", "profile": "profile"},
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validator.Validator",
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    "PKCE_REQUIRED": True,
}
