"""Test settings: the real PostgreSQL and Redis when their URLs are set (CI sets them), with
fast password hashing and plain static storage."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-key")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# The live servers and browsers of the tests speak plain HTTP; the production cookie and HSTS
# settings are tested on the settings module itself (tests/web/test_deploy_stack.py).
os.environ.setdefault("TOPOWEB_PLAIN_HTTP", "1")

from topoweb.config.settings import *  # noqa: E402,F403
from topoweb.config.settings import DATABASES, env  # noqa: E402

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True
# Several checkouts may test against one PostgreSQL at once; a suffix keeps them apart.
_suffix = env.str("TOPOWEB_TEST_DB_SUFFIX", default="")
DATABASES["default"]["TEST"] = {"NAME": f"test_topoweb{_suffix}"}
STATIC_ROOT = None  # type: ignore[assignment]  # nothing is collected in tests; whitenoise serves from the finders
# Tests share one Redis database with the broker, and some clear the cache: keep the cache
# in-process (tests of the shared throttle configure Redis themselves).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "answers": ANSWERS_CACHE,  # noqa: F405
}
