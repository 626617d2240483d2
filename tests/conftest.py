"""Suite-wide checks: the services the suite names must really be there, never skipped."""

import os

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API + live_server
