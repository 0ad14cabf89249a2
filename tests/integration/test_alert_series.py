"""Every series an alert rule reads exists in each way the relay is deployed, read as
Prometheus reads it: a scrape of a continuous `spark-submit jobs/relay.py`'s /metrics,
what an available-now drain (spark-submit) pushed to a real Pushgateway at its end, and
what the bundle's continuous job (its task's entry point, run as Databricks runs it)
pushes while it runs. What a mode lacks must come from the standing exporter
(`outbox-relay metrics serve`, scraped here too) and be listed as the exporter's in the
rules file's header, which docs/metrics.md points to.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from outbox_relay.stack import StackInfo
from outbox_relay.stream.runner import EXIT_OK
from tests.bundle import REPO, load_bundle
from tests.integration.conftest import ConfigFactory
from tests.integration.databricks_task import TaskRunner
from tests.integration.helpers import (
    Msg,
    create_topics,
    insert,
    query,
    unique,
    wait_for,
)
from tests.integration.process import kill_group, signal_group, spark_submit, write_profile
from tests.integration.prometheus import answers, free_port, get, parse, value

pytestmark = pytest.mark.integration

RULES = REPO / "deploy" / "prometheus" / "outbox-relay.rules.yml"
STATE_GROUP, PUSH_GROUP = "outbox-relay", "outbox-relay-push"
# The rule groups each deployment loads (docs/metrics.md, "Where each series comes
# from"): a relay that pushes gets the push group's staleness alerts too.
SERVED, PUSHED = (STATE_GROUP,), (STATE_GROUP, PUSH_GROUP)
LAST_SUCCESS = "outbox_relay_last_success_timestamp_seconds"
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset"}
CONTINUOUS_JOB = "outbox_relay_continuous"


def series_of(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left of it once label
    matchers, ranges, grouping clauses, function calls and operators are taken away."""
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for word in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if not expr[word.end():].lstrip().startswith("(") and word[0] not in PROMQL_WORDS:
            names.add(word[0])
    return names


def _groups() -> dict[str, set[str]]:
    """Each rule group's name and the series its alerts read."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {g["name"]: {s for r in g["rules"] for s in series_of(r["expr"])} for g in groups}


def _documented_as_the_exporters() -> set[str]:
    """The series the rules file's header says the standing exporter serves."""
    header = RULES.read_text(encoding="utf-8").split("groups:")[0]
    (block,) = re.findall(r"(?s)the outbox's state.*?(?=\n# -|\n#\n)", header)
    return set(re.findall(r"\boutbox_relay_[a-z_]+", block))


def _names(text: str, **labels: str) -> set[str]:
    return {name for name, _ in parse(text, **labels)}


def _deliver(url: str, topic: str, n: int = 3) -> None:
    """Messages for a running relay; returns once it has deleted them all."""
    insert(url, [[Msg(topic, f"k{i}".encode(), f"v{i}".encode())] for i in range(n)])
    assert wait_for(lambda: query(url, "SELECT count(*) FROM kafka_messages")[0][0] == 0,
                    240, 0.2), "the relay delivered nothing"


def _continuous_spark_submit(config_factory: ConfigFactory, url: str, topic: str,
                             tmp_path: Path) -> set[str]:
    port = free_port()
    config = config_factory([topic], name="served", metrics={"enabled": True, "port": port})
    log = tmp_path / "served.log"
    proc = spark_submit(write_profile(config, tmp_path / "served.toml"), log=log)
    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        _deliver(url, topic)
        assert wait_for(lambda: value(parse(get(metrics)), LAST_SUCCESS) > 0, 60, 0.5), \
            log.read_text()[-3000:]
        text = get(metrics)
        signal_group(proc, signal.SIGTERM)
        assert proc.wait(timeout=180) == EXIT_OK, log.read_text()[-3000:]
    finally:
        kill_group(proc)
    return _names(text)


def _drain_spark_submit(config_factory: ConfigFactory, url: str, topic: str, gateway: str,
                        tmp_path: Path) -> set[str]:
    job = unique("drain-job")
    config = config_factory([topic], name="drain", metrics={
        "enabled": True, "pushgateway_url": gateway, "job": job, "port": free_port()})
    insert(url, [[Msg(topic, b"k", b"v")]])
    log = tmp_path / "drain.log"
    proc = spark_submit(write_profile(config, tmp_path / "drain.toml"), "--available-now",
                        log=log)
    try:
        assert proc.wait(timeout=400) == EXIT_OK, log.read_text()[-3000:]
    finally:
        kill_group(proc)
    return _names(get(f"{gateway}/metrics"), job=job, instance=config.relay.source_name)


def _databricks_continuous_job(stack: StackInfo, url: str, topic: str, gateway: str,
                               tmp_path: Path) -> set[str]:
    """The bundle's continuous job, its variables as a deploy would resolve them (the
    stack's addresses, the Pushgateway), its task run as Databricks runs it."""
    bundle = load_bundle({"postgres_url": url, "kafka_bootstrap_servers": stack.kafka_bootstrap,
                          "state_volume": str(tmp_path / "state"), "pushgateway_url": gateway})
    task = bundle.command_task(CONTINUOUS_JOB, "run")
    # A free port for the driver's own /metrics: this host is shared, a job cluster's
    # driver is not.
    runner = TaskRunner(bundle.jobs[CONTINUOUS_JOB], tmp_path / "databricks",
                        profile_changes={"metrics": {"port": free_port()}})
    group = {"job": runner.profile["metrics"].get("job", "outbox-relay"),
             "instance": runner.profile["relay"]["source_name"]}
    log = tmp_path / "databricks.log"
    proc = runner.start(task, log)
    pushed = lambda: parse(get(f"{gateway}/metrics"), **group)  # noqa: E731
    try:
        _deliver(url, topic)
        # While it runs, with no end in sight: the push comes on its own.
        assert wait_for(lambda: value(pushed(), LAST_SUCCESS) > 0, 90, 0.5), \
            f"no push with a success from the running job\n{log.read_text()[-3000:]}"
        names = {name for name, _ in pushed()}
        signal_group(proc, signal.SIGTERM)
        assert proc.wait(timeout=180) == EXIT_OK, log.read_text()[-3000:]
    finally:
        kill_group(proc)
    return names


def _exporter(url: str, tmp_path: Path) -> set[str]:
    port = free_port()
    with (tmp_path / "exporter.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "outbox_relay.cli", "metrics", "serve", "--host",
             "127.0.0.1", "--port", str(port)],
            env={**_env_without_relay(), "RELAY_POSTGRES_URL": url}, stdout=log,
            stderr=subprocess.STDOUT)
    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        assert wait_for(lambda: answers(metrics), 60, 0.2), \
            (tmp_path / "exporter.log").read_text()
        text = get(metrics)
    finally:
        proc.terminate()
        proc.wait(30)
    assert value(parse(text), "outbox_relay_database_up") == 1, text
    return _names(text)


def _env_without_relay() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}


def test_every_alerts_series_exists_in_every_deployment(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, pushgateway: str,
    tmp_path: Path,
) -> None:
    groups = _groups()
    assert set(groups) == {STATE_GROUP, PUSH_GROUP}, sorted(groups)
    topic = unique("alert-series")
    create_topics(stack.kafka_bootstrap, {topic: 1})
    exposed = {
        "spark-submit, continuous (scraped)": (SERVED, _continuous_spark_submit(
            make_config, migrated_url, topic, tmp_path)),
        "spark-submit --available-now (pushed at its end)": (PUSHED, _drain_spark_submit(
            make_config, migrated_url, topic, pushgateway, tmp_path)),
        "the bundle's continuous job (pushes while it runs)": (PUSHED, _databricks_continuous_job(
            stack, migrated_url, topic, pushgateway, tmp_path)),
    }
    # After the relays: the topic is known, so the exporter's per-topic gauges have samples.
    exporter = _exporter(migrated_url, tmp_path)
    documented = _documented_as_the_exporters()
    for mode, (loaded, names) in exposed.items():
        wanted = set().union(*(groups[g] for g in loaded))
        from_the_exporter = wanted - names
        assert from_the_exporter <= exporter, (mode, sorted(from_the_exporter - exporter))
        assert from_the_exporter <= documented, (mode, sorted(from_the_exporter - documented))
        assert LAST_SUCCESS in names, (mode, sorted(names))
