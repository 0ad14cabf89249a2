"""The README's first command: local stack, schema, a demo outbox, a drain, a summary."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from confluent_kafka.admin import AdminClient, NewTopic

from outbox_relay.config import Config
from outbox_relay.config.load import load_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import migrate

REPO = Path(__file__).resolve().parents[1]
DEMO_TOPICS = {"demo.orders": 3, "demo.customers": 2, "demo.compacted.prices": 1}

COUNT_ROWS = "SELECT count(*) AS n FROM kafka_messages"
INSERT_MESSAGE = """
INSERT INTO kafka_messages (topic, message, key, partition_key, headers)
VALUES (%s, %s, %s, %s, %s)
"""


def _stack_env() -> dict[str, str]:
    env = dict(os.environ)
    if env.get("RELAY_POSTGRES_URL") and env.get("RELAY_KAFKA_BOOTSTRAP_SERVERS"):
        return env
    from outbox_relay import stack

    info = stack.up()
    env.setdefault("RELAY_POSTGRES_URL", info.postgres_url)
    env.setdefault("RELAY_KAFKA_BOOTSTRAP_SERVERS", info.kafka_bootstrap)
    return env


def _create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    new = [
        NewTopic(t, num_partitions=n, replication_factor=1)
        for t, n in DEMO_TOPICS.items()
        if t not in existing
    ]
    for future in admin.create_topics(new).values() if new else []:
        future.result()


def _seed(db: Database, messages: int) -> int:
    row = db.one(COUNT_ROWS)
    if row and row["n"] > 0:
        return 0
    rng = random.Random(7)
    topics = list(DEMO_TOPICS)
    with db.transaction() as cur:
        for i in range(messages):
            topic = topics[i % len(topics)]
            key = f"key-{rng.randrange(50)}"
            body = json.dumps({"n": i, "topic": topic, "key": key}).encode()
            headers = json.dumps({"trace-id": f"demo-{i}"})
            cur.execute(INSERT_MESSAGE, (topic, body, key.encode(), None, headers))
    return messages


def _print_status(config: Config, config_path: str) -> None:
    """`outbox-relay status` after the drain, in this process (no JVM)."""
    from outbox_relay.cli.observe import print_status

    # The relay ran in REPO, so a relative ledger path is under it, wherever this runs.
    ledger = config.ledger.path
    if not urlsplit(ledger).scheme and not Path(ledger).is_absolute():
        config = config.model_copy(update={"ledger": config.ledger.model_copy(
            update={"path": str(REPO / ledger)})})
    print(f"\n$ outbox-relay --config {config_path} status", flush=True)
    print_status(config)


def run_demo(config_path: str, messages: int) -> int:
    env = _stack_env()
    os.environ.update({k: env[k] for k in ("RELAY_POSTGRES_URL", "RELAY_KAFKA_BOOTSTRAP_SERVERS")})
    config = load_config(REPO / config_path if not Path(config_path).is_absolute() else config_path)
    db = Database(config.postgres, "outbox-relay-demo")
    try:
        applied = migrate(db)
        print(f"schema: {'applied ' + ', '.join(applied) if applied else 'up to date'}")
        _create_topics(config.kafka.bootstrap_servers)
        seeded = _seed(db, messages)
        print(f"demo outbox: {'seeded ' + str(seeded) if seeded else 'already has'} messages")
    finally:
        db.close()
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) or "spark-submit"
    cmd = [submit, str(REPO / "jobs" / "relay.py"), "--config", config_path, "--available-now"]
    print("running:", " ".join(["spark-submit", "jobs/relay.py", *cmd[2:]]), flush=True)
    started = time.monotonic()
    # The local stack is on 127.0.0.1, and so is this one-machine Spark.
    env = {"SPARK_LOCAL_IP": "127.0.0.1", **env, "PYSPARK_PYTHON": sys.executable}
    code = subprocess.call(cmd, cwd=REPO, env=env)
    print(f"relay exited {code} after {time.monotonic() - started:.1f} s (including JVM start)")
    _print_status(config, config_path)
    # The relay's own code is one of outbox_relay.exit_codes; killed by signal N, report 128 + N
    # as a shell does.
    return code if code >= 0 else 128 - code
