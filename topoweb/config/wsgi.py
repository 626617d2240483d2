"""WSGI entry point for gunicorn."""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")
application = get_wsgi_application()

# What is loaded by now (settings, models, every view the URLconf imports, here rather than on
# the first request) lives as long as the process, yet every full collection of the cyclic
# garbage collector walks it, which shows as occasional stalls in the latency tail. Frozen,
# collections walk only what requests make.
get_resolver().url_patterns  # noqa: B018 - imports the views
gc.collect()
gc.freeze()
