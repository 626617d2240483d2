"""Content-Security-Policy on every HTML response: the dashboard, sign-in, the acceptance
pages, the admin, error pages. Scripts only from our own origin, never inline. The API docs
pages carry a policy of their own: drf-spectacular's Swagger page bootstraps with an inline
script, and those pages show no stored data an attacker could have written."""

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
DOCS_POLICY = POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'") + (
    "; worker-src 'self' blob:"
)
DOCS_URL_NAMES = frozenset({"api-docs", "api-redoc"})


class ContentSecurityPolicyMiddleware:
    """Adds the policy to every HTML response that does not set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" in response:
            return response
        if not response.get("Content-Type", "").startswith("text/html"):
            return response
        match = getattr(request, "resolver_match", None)
        docs = match is not None and match.url_name in DOCS_URL_NAMES
        response["Content-Security-Policy"] = DOCS_POLICY if docs else POLICY
        return response
