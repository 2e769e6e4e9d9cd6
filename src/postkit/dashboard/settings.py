"""What a dashboard serves and to whom: its database, its namespaces, whether it may change
anything, and who may open it."""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from postkit.errors import ConfigurationError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine: a loopback address or
    ``localhost``. Anything else (``0.0.0.0``, a LAN address, a name) is reachable from
    elsewhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class DashboardSettings:
    """The dashboard's configuration.

    Attributes:
        dsn: the database; every read and every action runs as this DSN's role, so the
            privilege model decides what the dashboard may see and do.
        namespaces: the namespaces it shows; empty means every namespace the role may see.
        read_only: refuse every action (pause, purge, cancel, redrive) with 403.
        token: when set, every request must carry it (``Authorization: Bearer``, or the
            cookie that the form at ``/login`` sets). Required to bind beyond loopback.
        host, port: where it listens; the allowed ``Host`` headers follow from them.
        refresh_seconds: how often the pages poll for new figures.
    """

    dsn: str
    namespaces: Sequence[str] = ()
    read_only: bool = False
    token: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    refresh_seconds: float = 2.0
    pool_size: int = 4
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def __post_init__(self) -> None:
        if self.token is not None and (
            self.token != self.token.strip() or not self.token.isprintable()
        ):
            # A token read from a file keeps its newline; a header or an address bar cannot
            # carry it, and a blank token guards nothing.
            raise ConfigurationError(
                "the dashboard token must not be blank, start or end with white space, or hold "
                "a newline or another control character: strip it (a file read with "
                '--token "$(cat FILE)" loses its trailing newline)'
            )
        if self.token is not None and len(self.token) < 16:
            raise ConfigurationError(
                "the dashboard token must be at least 16 characters; "
                "generate one with: python -c 'import secrets; print(secrets.token_urlsafe())'"
            )
        if self.token is None and not is_loopback(self.host):
            raise ConfigurationError(
                f"refusing to serve the dashboard on {self.host}, which other machines can "
                "reach, without a token: pass --token or set POSTKIT_DASHBOARD_TOKEN (or bind "
                "to 127.0.0.1)"
            )
        if not 0 <= self.port <= 65535:
            raise ConfigurationError(f"port must be between 0 and 65535, got {self.port}")
