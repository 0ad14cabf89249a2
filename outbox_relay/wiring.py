"""The one place that wires the relay's parts together. Nothing connects at import time."""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from outbox_relay.config import Config
from outbox_relay.control.claims import Claims
from outbox_relay.control.db import Database
from outbox_relay.control.kafka_admin import KafkaAdmin
from outbox_relay.control.liveness import Liveness
from outbox_relay.control.locks import Backoff, TopicLocks
from outbox_relay.control.parking import Parking
from outbox_relay.data.plan import RecordPlan
from outbox_relay.direct.producer import producer_config
from outbox_relay.direct.send import Sender
from outbox_relay.launch.spark import backlogs_on_driver
from outbox_relay.ledger.delta import Ledger
from outbox_relay.observe.runtime import RuntimeMetrics
from outbox_relay.rules.cloudevent_topics import default_types
from outbox_relay.rules.topic_rules import rule_for
from outbox_relay.stream.batch import BatchProcessor
from outbox_relay.stream.batch_settings import BatchSettings
from outbox_relay.stream.delivery import Delivery
from outbox_relay.stream.direct_lane import DirectLane, DirectSettings
from outbox_relay.stream.lanes import DrainLane
from outbox_relay.stream.round import Round, RoundSettings
from outbox_relay.stream.settle import Settlement
from outbox_relay.stream.spark_lane import SparkLane
from outbox_relay.stream.stats import RelayStats
from outbox_relay.stream.stop import StopSignal
from outbox_relay.stream.topic_check import TopicCheck, TopicCheckSettings


def fencing_token(source_name: str) -> str:
    """Unique per process: relays that share a source name still fence each other."""
    return f"{source_name}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class Relay:
    config: Config
    # None until the run's session is up (outbox_relay.launch.session, attach_spark): the
    # direct lane delivers meanwhile.
    spark: SparkSession | None
    token: str
    db: Database
    locks: TopicLocks
    heartbeat_locks: TopicLocks
    claims: Claims
    parking: Parking
    admin: KafkaAdmin
    ledger: Ledger
    metrics: RuntimeMetrics
    # The drain lanes' own control planes (outbox_relay.stream.lanes); none when they are off.
    drains: list[Relay] = field(default_factory=list)
    # The process's proof of life for its tokens' locks (issue 52); the main lane's only.
    liveness: Liveness | None = None

    def attach_spark(self, spark: SparkSession) -> None:
        """The run's session is up: Spark writes from now on, and copies the ledger
        where delta-rs does not."""
        self.spark = spark
        self.ledger.attach(spark)
        for lane in self.drains:
            lane.spark = spark

    def close(self) -> None:
        for db in (self.db, self.heartbeat_locks.db, self.ledger.db):
            db.close()
        for lane in self.drains:
            lane.db.close()
            lane.heartbeat_locks.db.close()
        # Last: once it is closed, a lock left behind is taken over at once.
        if self.liveness is not None:
            self.liveness.close()


@dataclass(frozen=True)
class ControlPlane:
    """A lane's connection, locks, claims and parking under one token: each field is the
    Relay field of the same name."""

    db: Database
    locks: TopicLocks
    heartbeat_locks: TopicLocks
    claims: Claims
    parking: Parking


def control_plane(config: Config, token: str, name: str) -> ControlPlane:
    relay = config.relay
    backoff = Backoff(relay.backoff_base_s, relay.backoff_max_s)
    db = Database(config.postgres, name)
    # The heartbeat thread gets its own connection: a psycopg2 connection must not be
    # shared by threads mid-transaction.
    heartbeat_db = Database(config.postgres, f"{name}-heartbeat")
    return ControlPlane(
        db=db,
        locks=TopicLocks(db, token, relay.lock_timeout_s, backoff),
        heartbeat_locks=TopicLocks(heartbeat_db, token, relay.lock_timeout_s, backoff),
        claims=Claims(db, token, relay.lock_timeout_s, relay.header_prefix, relay.source_name),
        parking=Parking(db, token, relay.lock_timeout_s, relay.source_name, relay.header_prefix),
    )


# A drain lane's token is its process's token with this suffix: `/drain` for the first
# lane, `/<n>/drain` for the n-th after it.
DRAIN_SUFFIX = "/drain"
_LANE_SUFFIX = re.compile(r"(/\d+)?" + re.escape(DRAIN_SUFFIX) + "$")


def lane_token(token: str, lane: int) -> str:
    """The token of drain lane `lane` (0-based) of the process whose token is `token`."""
    return token + (f"/{lane + 1}" if lane else "") + DRAIN_SUFFIX


def process_token(token: str) -> str:
    """The token of the process a lane's token belongs to (itself for a main lane's)."""
    return _LANE_SUFFIX.sub("", token)


def drain_lane(main: Relay, lane: int = 0) -> Relay:
    """Drain lane `lane`'s view of `main`: its own token and connections, the rest
    shared. A token of its own because the executors' read view shows a token's latest
    batch, and the lanes claim concurrently; the locks then keep a topic in one lane."""
    token = lane_token(main.token, lane)
    name = "outbox-relay-drain" + (f"-{lane + 1}" if lane else "")
    plane = control_plane(main.config, token, name)
    return Relay(config=main.config, spark=main.spark, token=token, **vars(plane),
                 admin=main.admin, ledger=main.ledger, metrics=main.metrics)


def build_relay(config: Config, spark: SparkSession | None,
                registry: CollectorRegistry | None = None) -> Relay:
    """`registry` receives the runtime metrics (a new one when None); it is what the
    relay serves or pushes, so a collector registered into it is exported too."""
    relay = config.relay
    token = fencing_token(relay.source_name)
    # The run's own counters only. The outbox's state (backlog, age, horizon) is the
    # standing exporter's (`outbox-relay metrics serve`): an available-now run pushes once
    # at exit, and the Pushgateway would show that state, frozen, until the next run.
    metrics = RuntimeMetrics(config.metrics, relay.source_name, registry)
    plane = control_plane(config, token, "outbox-relay")
    # The ledger copier thread has its own connection too.
    ledger_db = Database(config.postgres, "outbox-relay-ledger")
    built = Relay(
        config=config,
        spark=spark,
        token=token,
        **vars(plane),
        admin=KafkaAdmin(config.kafka),
        ledger=Ledger(spark, config, ledger_db),
        metrics=metrics,
    )
    if relay.drain_lane:
        built.drains = [drain_lane(built, lane) for lane in range(relay.drain_lanes)]
    # Before any topic lock: every token this process locks with is registered, so its
    # locks are taken over at once when it dies (outbox_relay.control.liveness).
    built.liveness = Liveness(config.postgres, [token, *(d.token for d in built.drains)])
    built.liveness.start()
    return built


def new_delivery(relay: Relay) -> Delivery:
    """A lane's Delivery: the driver's producer unless the profile turns it off, and
    Spark's sink once a session exists (Delivery.attach_spark)."""
    config = relay.config
    rules = list(config.relay.topic_rules)
    settlement = Settlement(relay.claims, relay.parking, rules)
    direct = None
    if config.relay.direct_lane:
        direct = DirectLane(
            Sender(producer_config(config.kafka, config.relay.partitioner)),
            DirectSettings.of(config, backlogs=backlogs_on_driver(config)), db=relay.db,
            admin=relay.admin, settlement=settlement,
            cloudevents=lambda topics: default_types(rules, topics),
            lost=lambda: delivery.lost_now())
    delivery = Delivery(relay.metrics, direct=direct,
                        transformed=lambda topic: rule_for(rules, topic).transform is not None)
    if relay.spark is not None:
        delivery.attach_spark(SparkLane(
            relay.spark, RecordPlan(relay.spark, config, relay.token), db=relay.db,
            admin=relay.admin, kafka=config.kafka, settlement=settlement,
            lost=delivery.lost_now))
    return delivery


def new_round(relay: Relay, stop: StopSignal, stats: RelayStats,
              finished: Callable[[], None]) -> Round:
    """A lane's Round, its Delivery and TopicCheck, each given the parts it uses."""
    config = relay.config
    delivery = new_delivery(relay)
    topics = TopicCheck(relay.db, relay.admin, TopicCheckSettings.of(config))
    return Round(relay.spark, delivery, topics, locks=relay.locks,
                 heartbeat_locks=relay.heartbeat_locks, claims=relay.claims,
                 parking=relay.parking, metrics=relay.metrics,
                 settings=RoundSettings.of(config), stop=stop, stats=stats, finished=finished)


def batch_processor(relay: Relay, stop: StopSignal, *, bound: int | None = None,
                    continuous: bool = False,
                    stats: RelayStats | None = None) -> BatchProcessor:
    """The body of foreachBatch for `relay`'s lane, with its drain lanes beside it; every
    lane counts into one RelayStats."""
    shared = stats if stats is not None else RelayStats()
    # A drain lane's rounds are backlogs: Spark's, once the session is up.
    drains = [DrainLane(batch_processor(lane, stop, bound=bound, stats=shared),
                        relay.spark, stop, relay.config.relay.poll_interval_s, relay.metrics)
              for lane in relay.drains if relay.spark is not None]
    return BatchProcessor(relay.db, relay.metrics, BatchSettings.of(relay.config),
                          lambda finished: new_round(relay, stop, shared, finished), stop,
                          bound=bound, continuous=continuous, stats=shared, drains=drains)
