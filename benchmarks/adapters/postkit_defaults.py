"""Postkit at its defaults: ``postkit worker benchmarks.adapters.postkit_defaults --processes N``,
N the machine's cores, and no other option, as a user starts it (the DSN comes through
``POSTKIT_DSN``). The producer and the schema are :mod:`benchmarks.adapters.postkit`'s; this
module is also the MODULE the command loads (its :data:`handlers`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from benchmarks.adapters import CommandWorkers, WorkerConfig, Workers
from benchmarks.adapters.postkit import QUEUE, PostkitAdapter, _handler
from postkit.worker import Handlers

handlers = Handlers({QUEUE: _handler})

CORES = os.cpu_count() or 1
MODULE = "benchmarks.adapters.postkit_defaults"
ROOT = Path(__file__).resolve().parent.parent.parent


class PostkitDefaultsAdapter(PostkitAdapter):
    name = "postkit_defaults"
    title = "postkit (defaults)"
    configs = (WorkerConfig(CORES, 8, title=f"postkit worker --processes {CORES}"),)
    workloads = ("W1s",)
    tuning_note = (
        f"none: `postkit worker MODULE --processes {CORES}` (the machine's cores), every other "
        "option at its default (--concurrency 8, the adaptive prefetch, --vacuum-interval 2)"
    )

    def start_workers(self, config: WorkerConfig, probe_port: int | None = None) -> Workers:
        path = os.environ.get("PYTHONPATH", "")
        env = {
            **os.environ,
            "POSTKIT_DSN": self.dsn,
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p),
        }
        command = [sys.executable, "-m", "postkit.cli", "worker", MODULE]
        command += ["--processes", str(config.processes)]
        return CommandWorkers(command, env, str(ROOT))


ADAPTER = PostkitDefaultsAdapter
