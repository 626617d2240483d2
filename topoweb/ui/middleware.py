"""Content-Security-Policy for every page: scripts only from our own origin, never inline."""

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


class ContentSecurityPolicyMiddleware:
    """Adds the policy to responses that do not set their own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = POLICY
        return response
