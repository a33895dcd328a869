"""What a web page in a browser may not make the browser do to calmon (``docs/reference/ui.md``,
"What other sites cannot do").

- **Cross-site writes.** A request that changes state (any method but GET, HEAD, OPTIONS) is
  refused with 403 ``cross_site_request`` when the browser says another site made it: a
  ``Sec-Fetch-Site`` other than ``same-origin`` or ``none``, or an ``Origin`` whose host and
  port are not the request's ``Host`` (``Origin: null`` included). With tokens or without:
  a token-less server has no other defence, and a token's session cookie is not sent on such
  requests anyway. Clients that are no browser send neither header and pass. The scheme is not
  compared: behind a proxy that ends TLS the request arrives over http from an https page.
- **DNS rebinding.** A server without tokens answers only requests whose ``Host`` names it:
  ``localhost``, ``127.0.0.1``, ``::1``, the address the request arrived on, or a name of
  ``CALMON_ALLOWED_HOSTS``; any other ``Host`` is 421 ``misdirected_request``. A page on a
  rebound name reaches the server with its own name in ``Host``, so it reads nothing.

Nothing of a refused request reaches the routes: nothing is stored. Form bodies are refused by
the routes themselves, after the token is checked: the JSON routes take JSON only, and the
body-less POST (``…/recompute``) no form type (:func:`calmon.api.deps.no_form_body`), so that a
browser that sends no ``Origin`` cannot trigger it with a form either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from calmon.api.errors import error_response

#: ``Sec-Fetch-Site`` values of a request the server's own page (or the user) made
SAME_ORIGIN_FETCH: Final = frozenset({"same-origin", "none"})
#: methods that change nothing
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
#: names a token-less server always answers to
LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(host: str) -> str:
    """The name of a ``Host`` header (or of an origin's netloc), without its port, lowercase;
    an IPv6 literal without its brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def parse_allowed_hosts(text: str) -> frozenset[str]:
    """The names of ``CALMON_ALLOWED_HOSTS`` (separated by commas or spaces)."""
    return frozenset(host_name(part) for part in text.replace(",", " ").split() if part)


def cross_site(headers: dict[bytes, bytes]) -> bool:
    """Whether a browser says another site made this request (see the module docstring)."""
    fetch_site = headers.get(b"sec-fetch-site")
    if fetch_site is not None and fetch_site.decode("latin-1").lower() not in SAME_ORIGIN_FETCH:
        return True
    origin = headers.get(b"origin")
    if origin is None:
        return False
    parts = urlsplit(origin.decode("latin-1"))
    host = headers.get(b"host", b"").decode("latin-1").lower()
    return not (parts.scheme in ("http", "https") and host and parts.netloc.lower() == host)


class BrowserGuardMiddleware:
    """Refuse cross-site writes and, on a server without tokens, a foreign ``Host`` (module
    docstring)."""

    def __init__(self, app: ASGIApp, *, token_less: bool, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.token_less = token_less
        self.allowed_hosts = LOCAL_HOSTS | frozenset(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        refusal = None
        if self.token_less and not self._known_host(scope, headers):
            refusal = error_response(
                421,
                "misdirected_request",
                "this server answers only its own names (CALMON_ALLOWED_HOSTS adds more)",
                [{"field": "Host", "message": "not a name of this server"}],
            )
        elif scope["method"] not in SAFE_METHODS and cross_site(headers):
            refusal = error_response(
                403,
                "cross_site_request",
                "this request may only be sent from the server's own pages",
                [{"field": "Origin", "message": "another site sent it; nothing was done"}],
            )
        await (self.app if refusal is None else refusal)(scope, receive, send)

    def _known_host(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        name = host_name(headers.get(b"host", b"").decode("latin-1"))
        if not name or name in self.allowed_hosts:
            return True
        server = scope.get("server")
        return server is not None and name == host_name(str(server[0]))
