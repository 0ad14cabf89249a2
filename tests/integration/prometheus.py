"""Reading metrics the way Prometheus does: an HTTP scrape parsed by prometheus_client's
own parser, and a real Pushgateway on a free port (Debian's binary, tests/prometheus_tools)."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import wait_for
from tests.prometheus_tools import tool

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def answers(url: str) -> bool:
    """Whether `url` answers at all (a server still starting refuses the connection)."""
    try:
        return bool(get(url))
    except OSError:
        return False


def parse(text: str, **match: str) -> Samples:
    """Every sample whose labels include `match`, keyed by name and the other labels."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if all(s.labels.get(k) == v for k, v in match.items()):
                rest = frozenset((k, v) for k, v in s.labels.items() if k not in match)
                out[(s.name, rest)] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@contextmanager
def running_pushgateway(tmp_path: Path) -> Iterator[str]:
    """A real Pushgateway on a free port of 127.0.0.1; yields its address."""
    port = free_port()
    log = (tmp_path / "pushgateway.log").open("w")
    proc = subprocess.Popen(
        [str(tool("prometheus-pushgateway")), f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    address = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: answers(f"{address}/-/ready"), 30, 0.1), \
            (tmp_path / "pushgateway.log").read_text()
        yield address
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
