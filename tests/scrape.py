"""Reading Prometheus metrics in tests: scrape an endpoint over HTTP, parse the text with
prometheus_client's own parser, and pick one sample by name and labels."""

from __future__ import annotations

import contextlib
import socket
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def parse(text: str) -> list[Sample]:
    """Every sample of an exposition text."""
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def scrape(url: str) -> list[Sample]:
    """Every sample ``url`` serves."""
    with urllib.request.urlopen(url, timeout=5) as response:
        return parse(response.read().decode())


def try_scrape(url: str) -> list[Sample] | None:
    """Every sample ``url`` serves, or None while nothing answers there (a process starting)."""
    try:
        return scrape(url)
    except (urllib.error.URLError, ConnectionError):
        return None


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` whose labels include ``labels``."""
    found = [
        sample.value
        for sample in samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]
    assert len(found) == 1, f"expected one {name} with {labels}, found {found}"
    return found[0]


def values(samples: list[Sample], name: str, by: str, **labels: str) -> dict[str, float]:
    """The values of the samples called ``name`` whose labels include ``labels``, by the value
    of their label ``by``."""
    return {
        sample.labels[by]: sample.value
        for sample in samples
        if sample.name == name and labels.items() <= sample.labels.items()
    }


def free_ports(count: int = 1) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 just now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count - 1 > 65535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        return first
    raise AssertionError(f"found no {count} consecutive free ports")
