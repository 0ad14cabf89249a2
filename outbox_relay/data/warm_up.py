"""A write of no rows through the whole data plane, at start-up, beside the first round.

A relay's first write in a fresh JVM took 9.2 s for 200,000 rows where the next ones took
2.2-3.1 s: 2.9 s of it before its job started (class loading, analysis and code
generation on the driver) and 6.3 s for the job (the JDBC driver, the Kafka producer and
the generated code compiled on the executors). A relay started on an empty outbox paid
all of that for the first messages written after it started: seconds of latency in its
first minute. This runs the same plan over no rows while the first round locks and
claims, or before the first message arrives, and Spark keeps what it loaded: the
classes, the compiled code and the Kafka producer (Spark pools producers by their
options, which are the relay's).

The relay's own plan is only planned here (RecordPlan.executable), never run: its read
names the relay's token, and a round beside the warm-up may have claimed rows under it.
What runs is a twin of that plan whose read names a token no claim ever carries (the
relay's token with a suffix of its own): it finds no row, so it never sends one.
"""

from __future__ import annotations

from outbox_relay.config import KafkaConfig
from outbox_relay.data.plan import RecordPlan
from outbox_relay.data.sink import write_records

WARM_UP_SUFFIX = "/warm-up"


def warm_up(plan: RecordPlan, kafka: KafkaConfig) -> None:
    """Plans `plan`'s records of a small batch, and runs its idle twin's through Spark's
    Kafka sink."""
    plan.executable(plan.records([], rows=0))
    idle = plan.twin(WARM_UP_SUFFIX)
    write_records(idle.executable(idle.records([], rows=0)), kafka)
