"""THE SHAPE LIMIT (issue 10, W1): what the relay's data plane alone does with a backlog.

The whole backlog as one claimed batch (one session per topic, inserted here), read by
the relay's own executor read (outbox_relay.data.plan.RecordPlan: the JDBC view, the key split,
in_key_order, the records) and written by its own Kafka sink (outbox_relay.data.sink), in a
fresh Spark session built as the relay builds it; no claim checks, no lock, no delete,
no ledger, no streaming trigger. Its first write pays the JVM's warm-up as the relay's
first round does; a second pass over the same rows shows the warm rate.

Held against the pipeline limit (COPY, produce, one delete: no Spark), it says how far
the user's shape itself, a JDBC read on the executors and Spark's Kafka sink, can go.

Run by the bench under spark-submit: ``spark-submit bench/probes/shape.py --config PROFILE``;
it prints one JSON line, ``{"rows": N, "cold_s": ..., "warm_s": ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# The repo root instead of this script's folder, whose profile.py would shadow the
# standard library's (pyspark imports cProfile).
sys.path[0] = str(Path(__file__).resolve().parents[2])

from outbox_relay.config.load import load_config  # noqa: E402
from outbox_relay.control.db import Database  # noqa: E402
from outbox_relay.control.kafka_admin import KafkaAdmin, TopicInfo  # noqa: E402
from outbox_relay.control.locks import ENSURE_TOPICS  # noqa: E402
from outbox_relay.control.migrate import migrate  # noqa: E402
from outbox_relay.control.topic_meta import TopicMeta  # noqa: E402
from outbox_relay.data.plan import RecordPlan  # noqa: E402
from outbox_relay.data.sink import write_records  # noqa: E402
from outbox_relay.launch.spark import build_session  # noqa: E402

TOKEN = "bench-shape"
# One session per topic holding all its ids: what a claim without limits would record.
ONE_BATCH = """
INSERT INTO relay_sessions (session_id, batch_id, topic, lock_token, ids)
SELECT gen_random_uuid(), nextval('relay_batch_seq'), topic, %s, array_agg(id ORDER BY id)
FROM kafka_messages GROUP BY topic
"""
SAME_BATCH = """
UPDATE relay_sessions SET batch_id = (SELECT max(batch_id) FROM relay_sessions)
WHERE lock_token = %s
"""
ROWS = "SELECT count(*) AS n FROM kafka_messages"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    args = p.parse_args()
    config = load_config(args.config, env={})
    db = Database(config.postgres, "bench-shape")
    migrate(db)
    db.execute(ONE_BATCH, (TOKEN,))
    db.execute(SAME_BATCH, (TOKEN,))
    row = db.one(ROWS)
    rows = int(row["n"]) if row else 0
    topics = [r["topic"] for r in db.all("SELECT DISTINCT topic FROM relay_sessions")]
    # What the relay's topic check stores before a claim; the read brings it to each row.
    db.execute(ENSURE_TOPICS, (topics,))
    infos = KafkaAdmin(config.kafka).describe(topics)
    TopicMeta(db).note_present({t: i.partitions for t, i in infos.items()
                                if isinstance(i, TopicInfo)})
    started = time.perf_counter()
    spark = build_session(config)
    session_s = time.perf_counter() - started
    plan = RecordPlan(spark, config, TOKEN)
    passes = []
    for _ in range(2):
        begun = time.perf_counter()
        write_records(plan.records(topics), config.kafka)
        passes.append(time.perf_counter() - begun)
    spark.stop()
    db.close()
    print(json.dumps({"rows": rows, "session_s": session_s, "cold_s": passes[0],
                      "warm_s": passes[1]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
