"""Who may open the dashboard and what reaches its actions, as one ASGI middleware.

In order, for every request:

1. **Host.** Without a token the dashboard listens on loopback only, and answers only requests
   whose ``Host`` is a loopback name: a web page elsewhere that points its own domain at
   127.0.0.1 (DNS rebinding) gets 421, never the data.
2. **Token.** With a token, every request carries it, as ``Authorization: Bearer <token>``
   (scripts, Prometheus) or as the HttpOnly, SameSite=Strict cookie that ``/login?token=...``
   sets for a browser (a digest of the token, so that any token text makes a valid cookie),
   found among whatever cookies other servers on the host set (a browser sends a host's
   cookies to every port of it). Compared in constant time.
3. **Actions.** Every change is a POST. Under ``--read-only`` each is refused (403). Otherwise
   it must carry the CSRF token of this process (``X-Postkit-CSRF``, which the page reads from
   ``/api/meta``; another site can neither read it nor send a custom header without a CORS
   preflight, which is never granted), and an ``Origin``, when sent, must be this one.
4. **Headers.** Every response forbids framing, sniffing and any script or style from elsewhere
   (Content-Security-Policy), so a payload shown as text stays text.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from postkit.dashboard.settings import DashboardSettings, is_loopback

COOKIE = "postkit_dashboard"
CSRF_HEADER = "x-postkit-csrf"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """The middleware; wraps the whole application."""

    def __init__(self, app: ASGIApp, settings: DashboardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _respond(send, *refusal)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(
        self, scope: Scope, headers: dict[str, str]
    ) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]] | None:
        settings = self.settings
        host = headers.get("host", "")
        if settings.token is None and not is_loopback(_hostname(host)):
            return 421, {"error": f"this dashboard answers on loopback only, not {host!r}"}, []
        if settings.token is not None:
            if scope["path"] == "/login":
                return self._login(scope)
            if not self._authenticated(headers):
                return (
                    401,
                    {
                        "error": "this dashboard needs its token: open /login?token=<token> "
                        "once, or send Authorization: Bearer <token>"
                    },
                    [(b"www-authenticate", b'Bearer realm="postkit"')],
                )
        if scope["method"] in _SAFE_METHODS:
            return None
        if settings.read_only:
            return 403, {"error": "the dashboard is read-only (--read-only)"}, []
        if not hmac.compare_digest(
            headers.get(CSRF_HEADER, "").encode(), settings.csrf_token.encode()
        ):
            return 403, {"error": "missing or wrong CSRF token (reload the page)"}, []
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != host:
            return 403, {"error": f"cross-origin request from {origin!r} refused"}, []
        return None

    def _authenticated(self, headers: dict[str, str]) -> bool:
        assert self.settings.token is not None
        expected = self.settings.token.encode()
        bearer = headers.get("authorization", "")
        # Compared as bytes of UTF-8: the header's bytes, which _headers decoded as Latin-1,
        # are those of the token a client sent as UTF-8.
        if bearer.lower().startswith("bearer ") and hmac.compare_digest(
            bearer[7:].strip().encode("latin-1"), expected
        ):
            return True
        # Parsed as browsers write it: http.cookies drops every cookie of a header when one
        # of them (another server's JSON value, say) is not to its grammar.
        value = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        return value is not None and hmac.compare_digest(
            value.encode(), self._cookie_value().encode()
        )

    def _cookie_value(self) -> str:
        """What the login cookie holds: a digest of the token, cookie-safe whatever the
        token's characters."""
        assert self.settings.token is not None
        return hashlib.sha256(
            b"postkit-dashboard-cookie:" + self.settings.token.encode()
        ).hexdigest()

    def _login(self, scope: Scope) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]:
        assert self.settings.token is not None
        expected = self.settings.token.encode()
        typed = _query_value(scope.get("query_string", b"").decode("latin-1"), "token")
        if not any(hmac.compare_digest(given.encode(), expected) for given in typed):
            return 401, {"error": "wrong token"}, []
        cookie = f"{COOKIE}={self._cookie_value()}; Path=/; HttpOnly; SameSite=Strict"
        return 303, {"ok": True}, [(b"location", b"/"), (b"set-cookie", cookie.encode())]


def _query_value(query: str, name: str) -> tuple[str, str]:
    """A query parameter read both ways a ``+`` is meant: as typed into an address bar, which
    keeps it (a base64 token's ``+``), and as a form encoder writes a space."""
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == name:
            return unquote(value), unquote_plus(value)
    return "", ""


def _headers(scope: Scope) -> dict[str, str]:
    return {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}


def _hostname(host: str) -> str:
    """The name part of a Host header: ``127.0.0.1:8181`` -> ``127.0.0.1``, ``[::1]:80`` ->
    ``::1``."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _respond(
    send: Send, status: int, body: dict[str, Any], extra: list[tuple[bytes, bytes]]
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *extra,
                *_SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
