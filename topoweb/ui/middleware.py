"""Content-Security-Policy for the dashboard's pages: scripts only from our own origin, never
inline. The API docs (drf-spectacular's Swagger page bootstraps with an inline script) and the
admin keep their own behaviour."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

# Cytoscape and uPlot set element styles from script, which CSP allows; only inline <script>
# and event-handler attributes are what an injected hostname could use, and those are shut.
POLICY = (
    "default-src 'self'; "
    "script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; "
    "connect-src 'self'; "
    "object-src 'none'; "
    "base-uri 'self'; "
    "form-action 'self'; "
    "frame-ancestors 'none'"
)


DASHBOARD_URL_NAMES = frozenset({"login", "logout"})


class ContentSecurityPolicyMiddleware:
    """Adds the policy to the dashboard's responses (the `ui` namespace and sign-in/out)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        match = request.resolver_match
        ours = match is not None and (
            match.app_name == "ui" or match.url_name in DASHBOARD_URL_NAMES
        )
        if ours and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = POLICY
        return response
