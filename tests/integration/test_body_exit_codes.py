"""What ends a micro-batch body decides the run's exit code, on the real stack: a
PostgreSQL statement that fails there exits DATABASE_ERROR (7), which a scheduler
retries; a defect of the relay exits DEFECT (15), which it does not. Spark hands the
body's exception back wrapped in a StreamingQueryException, which said neither (5).

Rows arrive once the query runs, so the failure happens inside a body Spark started;
whatever left the outbox must be in Kafka (a consumer reads it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from outbox_relay.exit_codes import ExitCode
from outbox_relay.stack import StackInfo
from outbox_relay.stream.round import Round
from outbox_relay.stream.stop import StopSignal
from tests.integration.conftest import ConfigFactory, RelayRunner, run_in_thread
from tests.integration.helpers import (
    consume,
    create_topics,
    every_key_shape,
    insert,
    query,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

SOURCE_POLLS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'outbox-relay-source'")
# A real database error in the round's delete: the server refuses it (for each row: the
# claim, which deletes no row, passes; the delete of what Kafka acknowledged fails).
REFUSE_DELETES = """
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'deletes refused by the test'; END $$;
CREATE TRIGGER refuse BEFORE DELETE ON kafka_messages
FOR EACH ROW EXECUTE FUNCTION refuse();
"""


def _a_defect(*args: object, **kwargs: object) -> None:
    raise TypeError("a defect in the round's bookkeeping")


@pytest.fixture(params=["database-error", "defect"])
def failure(request: pytest.FixtureRequest, migrated_url: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[ExitCode]:
    if request.param == "database-error":
        query(migrated_url, REFUSE_DELETES)
        yield ExitCode.DATABASE_ERROR
    else:
        # Called after the delete committed: what was deleted had been acknowledged.
        monkeypatch.setattr(Round, "_count", _a_defect)
        yield ExitCode.DEFECT


def test_a_failed_body_exits_with_its_causes_code(
    stack: StackInfo, migrated_url: str, make_config: ConfigFactory, run_relay: RelayRunner,
    failure: ExitCode, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique("body-exit")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    stop = StopSignal()
    config = make_config([topic], relay={"micro_batch_s": 600})
    thread, results = run_in_thread(lambda: run_relay(config, available_now=False, stop=stop))
    try:
        assert wait_for(lambda: query(migrated_url, SOURCE_POLLS)[0][0] > 0, 120, 0.1), (
            "the query never started")
        ids = set(insert(migrated_url, [every_key_shape([topic], 12)]))
        thread.join(120)
    finally:
        stop.request("test")
        thread.join(60)
    assert results and results[0].exit_code == failure
    left = {r[0] for r in query(migrated_url, "SELECT id FROM kafka_messages")}
    gone = ids - left
    got = {r.outbox_id for r in consume(stack.kafka_bootstrap, [topic], expect=len(gone))}
    assert gone <= got, "deleted but not in Kafka"
    # The failed delete gave the lock back at once: no topic waits out the lock timeout.
    assert query(migrated_url, "SELECT topic FROM kafka_topic_info WHERE locked_by IS NOT NULL"
                 ) == []
    if failure == ExitCode.DATABASE_ERROR:
        # What Kafka acknowledged stays and goes again: the log names those ids.
        again = [r.getMessage() for r in caplog.records if "will be sent again" in r.getMessage()]
        assert again, "the log does not name what will be sent again"
        named = {int(i) for line in again for i in re.findall(r"\b(\d+)\b", line.split("ids")[-1])}
        assert named & left, again
