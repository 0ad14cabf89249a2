"""Pure pieces of the local stack: configs, state file, paths, helpers (no network)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from outbox_relay.launch import cache
from outbox_relay.stack import StackInfo, kafka, paths, postgres, proc
from outbox_relay.stack.jars import slf4j_binding, split_coordinate
from outbox_relay.stack.paths import StackPaths
from outbox_relay.stack.state import KafkaState, PostgresState, StackState, load_state, save_state


def _parse_properties(text: str) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in text.splitlines() if line and line[0] != "#"]
    return {key: value for key, value in pairs}


def test_server_properties_render_a_single_kraft_node(tmp_path: Path) -> None:
    rendered = kafka.render_properties(kafka.server_properties(9092, 9093, tmp_path / "logs"))
    props = _parse_properties(rendered)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"].startswith("PLAINTEXT://127.0.0.1:9092")
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["log.dirs"] == str(tmp_path / "logs")
    assert props["auto.create.topics.enable"] == "false"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "num.partitions",
    ):
        assert props[key] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_properties_escape_backslashes() -> None:
    assert "log.dirs=C:\\\\x" in kafka.render_properties({"log.dirs": "C:\\x"})


def test_log4j2_config_logs_to_the_given_file(tmp_path: Path) -> None:
    text = kafka.render_log4j2(tmp_path / "server.log")
    assert f"appender.file.fileName = {tmp_path / 'server.log'}" in text
    assert "rootLogger.level = INFO" in text


def test_cluster_id_is_a_base64url_uuid() -> None:
    for _ in range(50):
        cluster_id = kafka.new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_postgres_conf_quotes_values() -> None:
    conf = postgres.render_conf(postgres.server_settings(5433, "/run/it's"))
    assert "port = '5433'" in conf
    assert "listen_addresses = '127.0.0.1'" in conf
    assert "max_connections = '1000'" in conf
    assert "unix_socket_directories = '/run/it''s'" in conf


def test_postgres_falls_back_to_tcp_only_for_long_socket_paths(tmp_path: Path) -> None:
    short = StackPaths(Path("/s"))
    assert postgres.socket_dir_for(short, 5432) == str(short.pg_socket_dir)
    deep = StackPaths(tmp_path / ("d" * 120))
    assert postgres.socket_dir_for(deep, 5432) == ""


def test_postgres_url() -> None:
    assert postgres.postgres_url(5544) == "postgresql://postgres@127.0.0.1:5544/postgres"


def test_state_file_round_trip(tmp_path: Path) -> None:
    state = StackState(
        postgres=PostgresState(port=5432, pid=10),
        kafka=KafkaState(port=9092, controller_port=9093, pid=None),
    )
    save_state(tmp_path / "state.json", state)
    assert load_state(tmp_path / "state.json") == state
    assert list(tmp_path.iterdir()) == [tmp_path / "state.json"]


def test_missing_or_corrupt_state_reads_as_empty(tmp_path: Path) -> None:
    assert load_state(tmp_path / "absent.json") == StackState()
    (tmp_path / "bad.json").write_text("{not json")
    assert load_state(tmp_path / "bad.json") == StackState()
    (tmp_path / "odd.json").write_text('{"postgres": {"nope": 1}}')
    assert load_state(tmp_path / "odd.json") == StackState()


def test_env_lines() -> None:
    info = StackInfo("postgresql://postgres@127.0.0.1:1/postgres", "127.0.0.1:2")
    assert info.env_lines() == [
        "export RELAY_POSTGRES_URL=postgresql://postgres@127.0.0.1:1/postgres",
        "export RELAY_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:2",
    ]


def test_dirs_follow_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.STACK_DIR_ENV, raising=False)
    assert paths.default_stack_dir() == paths.repo_root() / ".relay-data" / "stack"
    assert (paths.repo_root() / "outbox_relay" / "stack" / "paths.py").is_file()
    monkeypatch.setenv(paths.STACK_DIR_ENV, str(tmp_path / "s"))
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path / "c"))
    assert StackPaths.resolve().root == tmp_path / "s"
    assert cache.cache_dir() == tmp_path / "c"


def test_slf4j_binding_matches_resolved_versions() -> None:
    jars = ["kafka_2.13-4.1.1.jar", "slf4j-api-1.7.36.jar", "log4j-core-2.24.3.jar"]
    assert slf4j_binding(jars) == ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3")
    jars2 = ["slf4j-api-2.0.17.jar", "log4j-core-2.25.0.jar"]
    assert slf4j_binding(jars2) == ("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.25.0")
    assert slf4j_binding(["slf4j-api-1.7.36.jar"]) is None
    assert split_coordinate("g:a:1") == ("g", "a", "1")


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = proc.pick_free_ports(3)
    assert len(set(ports)) == 3
    assert all(proc.port_is_free(port) for port in ports)


def test_service_ports_lie_below_the_kernels_ephemeral_range(tmp_path: Path) -> None:
    source = tmp_path / "ip_local_port_range"
    source.write_text("32768\t60999\n")
    assert proc.ephemeral_port_range(source) == (32768, 60999)
    assert proc.ephemeral_port_range(tmp_path / "absent") is None
    source.write_text("not a range\n")
    assert proc.ephemeral_port_range(source) is None
    ports = proc.pick_free_ports(3, ephemeral=(32768, 60999))
    assert len(set(ports)) == 3
    assert all(proc.SERVICE_PORTS_FROM <= port < 32768 for port in ports), ports
    # A range that leaves no room below it: the kernel picks, as before.
    assert proc.service_port_range((1024, 65535)) is None
    assert proc.service_port_range((10_500, 60999)) is None
    fallback = proc.pick_free_ports(2, ephemeral=(1024, 65535))
    assert len(set(fallback)) == 2
    assert all(proc.port_is_free(port) for port in fallback)


def test_terminate_only_signals_a_matching_process(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker")
    code = "import sys, time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code, marker])
    try:
        # Right after exec the new command line may not be readable yet.
        assert proc.wait_for(lambda: proc.process_matches(child.pid, marker), 5.0)
        assert not proc.process_matches(child.pid, marker[:-1])
        proc.terminate(child.pid, "some-other-marker", timeout=1.0)
        assert child.poll() is None
        proc.terminate(child.pid, marker, timeout=5.0)
        assert child.wait(5) != 0
    finally:
        child.kill()
        child.wait()
    assert not proc.process_matches(child.pid, marker)


def test_file_lock_is_reentrant(tmp_path: Path) -> None:
    with cache.file_lock(tmp_path / "l"), cache.file_lock(tmp_path / "l"):
        pass
    with cache.file_lock(tmp_path / "l"):
        pass
