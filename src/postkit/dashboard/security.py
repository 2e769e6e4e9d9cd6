"""Who may open the dashboard and what reaches its actions, as one ASGI middleware.

In order, for every request:

1. **Host.** Without a token the dashboard listens on loopback only, and answers only requests
   whose ``Host`` is a loopback name: a web page elsewhere that points its own domain at
   127.0.0.1 (DNS rebinding) gets 421, never the data.
2. **Token.** With a token, every request carries it, as ``Authorization: Bearer <token>``
   (scripts, Prometheus) or as the HttpOnly, SameSite=Strict cookie that the form at
   ``/login`` sets for a browser (a digest of the token, so that any token text makes a valid
   cookie), found among whatever cookies other servers on the host set (a browser sends a
   host's cookies to every port of it). Compared in constant time. The form POSTs the token,
   so that it stays out of the address bar, the browser's history and access logs; a token in
   the login URL's query is refused. A browser that asks for the page without the cookie is
   sent to the form.
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
from html import escape
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
        if self.settings.token is not None and scope["path"] == "/login":
            await self._login(scope, headers, receive, send)
            return
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
        if settings.token is not None and not self._authenticated(headers):
            if scope["method"] == "GET" and scope["path"] == "/":
                return 303, {"error": "log in first"}, [(b"location", b"/login")]
            return (
                401,
                {
                    "error": "this dashboard needs its token: log in at /login once, or send "
                    "Authorization: Bearer <token>"
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

    async def _login(
        self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send
    ) -> None:
        """GET shows the form; POST checks the token it sends and sets the cookie."""
        assert self.settings.token is not None
        if scope["method"] != "POST":
            if scope.get("query_string"):
                await _page(send, 400, _URL_TOKEN_REFUSED)
            else:
                await _page(send, 200, "")
            return
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != headers.get("host", ""):
            await _page(send, 403, f"cross-origin login from {origin!r} refused")
            return
        body = await _read_body(receive)
        if body is None:
            await _page(send, 413, "the form sent more than a token")
            return
        given = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get("token", [])
        expected = self.settings.token.encode()
        if not (len(given) == 1 and hmac.compare_digest(given[0].encode(), expected)):
            await _page(send, 401, "wrong token")
            return
        cookie = f"{COOKIE}={self._cookie_value()}; Path=/; HttpOnly; SameSite=Strict"
        await _respond(
            send, 303, {"ok": True}, [(b"location", b"/"), (b"set-cookie", cookie.encode())]
        )


_URL_TOKEN_REFUSED = (
    "a token in the address is refused: it would stay in the browser's history and the "
    "server's logs. Type it here instead."
)

# The login form: plain HTML, no script and no style of its own (the page's CSS needs the
# cookie), posting to itself; the message is escaped.
_LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Postkit dashboard: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1>Postkit dashboard</h1>{message}
<form method="post" action="/login">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button>
</form></main></body></html>
"""

_MAX_LOGIN_BODY = 64 * 1024


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or None past the size a token's form can take."""
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if len(body) > _MAX_LOGIN_BODY:
            return None
        if not message.get("more_body", False):
            return body


async def _page(send: Send, status: int, message: str) -> None:
    shown = f'<p role="alert">{escape(message)}</p>' if message else ""
    data = _LOGIN_PAGE.format(message=shown).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(data)).encode()),
                # A form posted under no-referrer says "Origin: null", which the login
                # refuses; same-origin lets it name this one, and tells nothing elsewhere.
                *[
                    (name, b"same-origin" if name == b"referrer-policy" else value)
                    for name, value in _SECURITY_HEADERS
                ],
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


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
