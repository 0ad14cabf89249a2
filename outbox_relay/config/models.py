"""The pydantic models of a profile's sections (the whole: outbox_relay.config.profile;
loaded by outbox_relay.config.load).

Secrets never live in the profile: the PostgreSQL password comes from
RELAY_POSTGRES_PASSWORD (or the password part of RELAY_POSTGRES_URL), and Kafka
security values may name an environment variable as ``env:NAME``.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field, SecretStr, field_validator

from outbox_relay.config.base import StrictModel
from outbox_relay.config.checks import (
    at_most_bytes,
    check_postgres_url,
    check_regex,
    keep_delivery_guarantees,
    keep_librdkafka_guarantees,
    resolve_env_ref,
)
from outbox_relay.config.topic_rule import TopicRule
from outbox_relay.rules.headers import DEFAULT_HEADER_PREFIX, DEFAULT_SOURCE_NAME
from outbox_relay.rules.record_size import DEFAULT_COMPRESSION, DEFAULT_MAX_REQUEST_SIZE

# Per-topic metric series before the rest are folded into one series: the default of
# `metrics.max_label_topics`, which `metrics serve --max-label-topics` overrides.
DEFAULT_TOP_TOPICS = 100


class PostgresConfig(StrictModel):
    url: str = "postgresql://postgres@127.0.0.1:5432/postgres"
    password: SecretStr | None = None
    # The variable the password is read from (unset: RELAY_POSTGRES_PASSWORD); each
    # database of a profile of several has its own (outbox_relay.config.databases).
    password_env: str | None = Field(None, min_length=1)
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "prefer"
    connect_timeout_s: int = Field(10, ge=1)
    # The control plane's; unset, half the lock timeout (Config._derive_control_timeouts).
    statement_timeout_ms: int = Field(30_000, ge=1)
    # The executors' JDBC read of a batch: no lock renewal waits on it, so it may be longer.
    read_statement_timeout_ms: int = Field(120_000, ge=0)
    # The control plane's too, and derived alike; below the lock timeout (config.checks).
    idle_in_transaction_timeout_ms: int = Field(30_000, ge=0)
    fetch_size: int = Field(10_000, ge=1)

    @field_validator("url")
    @classmethod
    def _postgres_scheme(cls, value: str) -> str:
        return check_postgres_url(value)

    @property
    def _parts(self) -> Any:
        return urlsplit(self.url)

    @property
    def host(self) -> str:
        return self._parts.hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return self._parts.port or 5432

    @property
    def database(self) -> str:
        return unquote(self._parts.path.lstrip("/")) or "postgres"

    @property
    def user(self) -> str:
        return unquote(self._parts.username or "postgres")

    @property
    def jdbc_url(self) -> str:
        # The password is never part of a JDBC URL: Spark prints URLs in plans and logs.
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    def where(self) -> str:
        """Where the server is, safe to print."""
        return f"{self.host}:{self.port}/{self.database}"


class KafkaConfig(StrictModel):
    bootstrap_servers: str = "127.0.0.1:9092"
    max_request_size: int = Field(DEFAULT_MAX_REQUEST_SIZE, ge=1024)
    # Kafka's own default. A write hands all its records to the producer at once, so its
    # last batch waits for the whole write: a first write of 100 MB to 1,000 new topics
    # passed 60 s in 2 of 5 default runs on a slow machine (bench/, W3), failed, and sent
    # 92% of itself again. The cost: a topic that never acknowledges holds its write this
    # long before the relay bisects the write and backs the topic off.
    delivery_timeout_ms: int = Field(120_000, ge=1000)
    request_timeout_ms: int = Field(15_000, ge=1000)
    linger_ms: int = Field(5, ge=0)
    batch_size: int = Field(262_144, ge=1024)
    compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"] = DEFAULT_COMPRESSION
    # The Java producer fetches metadata at most once per backoff, and each topic new to
    # it waits for a fetch before its first record: at Kafka's default (100 ms) a first
    # write to 1,000 topics waited about 50 s (bench/, W3). Also the first retry's pause.
    retry_backoff_ms: int = Field(10, ge=1)
    # The producer's record buffers: one open batch (batch_size) per partition written to.
    # Kafka's 32 MiB blocked the write of 1,000 single-partition topics with 32 KiB
    # batches: 4.0 s instead of 2.1 s with 256 MiB (bench/, W3). Taken as needed.
    buffer_memory: int = Field(256 * 1024 * 1024, ge=1024 * 1024)
    admin_timeout_s: float = Field(10.0, gt=0)
    # How long the broker must keep saying a topic does not exist before its rows count
    # as undeliverable (parked under `park`): a new topic's metadata takes a moment.
    missing_topic_grace_s: float = Field(60.0, ge=0)
    # Security and other client settings, passed through verbatim in each dialect:
    # java_options to Spark's Kafka sink, librdkafka_options to the driver's admin client
    # and its producer (the direct lane). Neither may touch what the guarantees rest on.
    java_options: dict[str, str] = Field(default_factory=dict)
    librdkafka_options: dict[str, str] = Field(default_factory=dict)

    @field_validator("java_options", "librdkafka_options")
    @classmethod
    def _resolve_env_refs(cls, value: dict[str, str]) -> dict[str, str]:
        return {k: resolve_env_ref(k, v) for k, v in value.items()}

    @field_validator("java_options")
    @classmethod
    def _keep_delivery_guarantees(cls, value: dict[str, str]) -> dict[str, str]:
        return keep_delivery_guarantees(value)

    @field_validator("librdkafka_options")
    @classmethod
    def _keep_direct_guarantees(cls, value: dict[str, str]) -> dict[str, str]:
        return keep_librdkafka_guarantees(value)


class LedgerConfig(StrictModel):
    path: str = ".relay-data/ledger"
    # A copy's Spark jobs (read staging, write Delta, read it back) take the cores the
    # rounds need; what waits is durable in PostgreSQL and answerable (`ledger show`
    # reads staging too). Once a minute, on a fixed rate: a copy of 2,000 msg/s takes
    # about 2.5 s beside the rounds, and every minute of a steady load holds one, where
    # copies every 120 s left some minutes with a copy and some without
    # (reports/performance-history.md, SOAK).
    flush_interval_s: float = Field(60.0, gt=0)
    # An available-now drain copies at its end, and while it runs this often. Unset: every
    # 2 s when delta-rs copies (a round's records take a fraction of a second in the
    # driver's Python, beside the executors' writes, and the copy at the end is then
    # small), every 600 s when Spark does (its jobs would take the rounds' cores).
    drain_flush_interval_s: float | None = Field(None, gt=0)
    retention_hours: int = Field(24 * 30, ge=168)
    # Who writes the copies: delta-rs in the driver's Python process (no JVM work beside
    # the rounds; outbox_relay.ledger.delta_rs), or Delta's Spark writer. `auto`: delta-rs for a
    # local path, Spark for object storage and Databricks' paths (dbfs:/, and the FUSE
    # mounts /Volumes and /dbfs, where delta-rs cannot commit), and Spark from the first
    # delta-rs failure that is not transient on (outbox_relay.ledger.delta_rs.transient).
    writer: Literal["auto", "spark", "delta-rs"] = "auto"


# Both travel in every record's reserved headers, which the size check must count: capped,
# so that a record the check lets through always fits (outbox_relay.rules.record_size).
MAX_SOURCE_NAME_BYTES = 200
MAX_HEADER_PREFIX_BYTES = 64


MAX_DRAIN_LANES = 8


class RelaySettings(StrictModel):
    source_name: str = Field(DEFAULT_SOURCE_NAME, min_length=1)
    batch_size: int = Field(10_000, ge=1, le=1_000_000)
    max_batch_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    # The wait between polls while work comes, and the least time between two rounds of a
    # trickle: a message waits for its round about half of this. A round's statements
    # cost the driver about as much for 25 rows as for 50: at 500 msg/s, 0.05 s took
    # 0.13 cores and 0.1 s 0.06-0.07 (docs/performance.md). After a second without work the
    # relay polls only every idle_poll_interval_s (an idle relay costs next to nothing).
    poll_interval_s: float = Field(0.1, gt=0)
    idle_poll_interval_s: float = Field(0.25, gt=0)
    lock_timeout_s: float = Field(60.0, gt=0)
    heartbeat_interval_s: float = Field(10.0, gt=0)
    backoff_base_s: float = Field(2.0, gt=0)
    backoff_max_s: float = Field(300.0, gt=0)
    partitioner: Literal["murmur2", "crc32"] = "murmur2"
    header_prefix: str = Field(DEFAULT_HEADER_PREFIX, min_length=1)
    include_topics: list[str] = Field(default_factory=lambda: [".*"])
    exclude_topics: list[str] = Field(default_factory=list)
    topic_rules: list[TopicRule] = Field(default_factory=list)
    read_partitions: int = Field(2, ge=1, le=256)
    checkpoint_path: str = ".relay-data/checkpoint"
    available_now_deadline_s: float = Field(60.0, ge=0)
    # An available-now drain claims nothing after this many seconds from its start and
    # exits LEFT_OVER if rows are left, before its runner's timeout kills it mid-write
    # (outbox_relay.stream.budget; --time-budget-s wins). None: no budget.
    available_now_budget_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    # How long one micro-batch body keeps running rounds (and, continuous, polling)
    # before it hands back to Spark; 0 runs one round per micro-batch. Each hand-back
    # stalls delivery for Spark's trigger (about 1 s on 2 cores): at 30 s, two stalls a
    # minute put W2's p99 above 1 s (reports/performance-history.md).
    micro_batch_s: float = Field(300.0, ge=0)
    # Topics whose claims come back full drain in rounds of their own, beside the other
    # topics' rounds (outbox_relay.stream.lanes); false runs every topic in one lane.
    drain_lane: bool = True
    # How many drain lanes share the backlogged topics, each topic in one at a time. A
    # round waits on PostgreSQL (claim, delete) about as long as on its write: with two,
    # one lane's claim and delete run under the other's write (W1 drained 1M rows in
    # 48.6 s instead of 58-68 s on one machine, docs/performance.md).
    drain_lanes: int = Field(2, ge=1, le=MAX_DRAIN_LANES)
    # A topic's claim of at most these rows and bytes, if the topic has no transform, is
    # sent by a Kafka producer in the driver (outbox_relay.direct), in writes of at most
    # as much: a Spark job costs about the same for one row as for ten thousand. Larger
    # claims, and every claim while this is false, are Spark jobs on the executors.
    direct_lane: bool = True
    direct_max_rows: int = Field(5_000, ge=1)
    direct_max_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # Where a backlog goes while the direct lane is on. "spark": Spark's executors, whose
    # cores are not the driver's on a cluster. "direct": the driver's producer too, in
    # claims of the direct lane's limits, and no Spark job for it. "auto": "direct" when
    # the master is local (spark-submit's, else spark.master), where the executors are
    # threads of the driver's JVM on the driver's cores and cost about three times the
    # producer's CPU per message (docs/performance.md, MANY); "spark" on a cluster.
    backlog_lane: Literal["auto", "spark", "direct"] = "spark"

    @field_validator("include_topics", "exclude_topics")
    @classmethod
    def _valid_regexes(cls, value: list[str]) -> list[str]:
        return [check_regex(v) for v in value]

    @field_validator("source_name")
    @classmethod
    def _short_source_name(cls, value: str) -> str:
        return at_most_bytes(value, MAX_SOURCE_NAME_BYTES)

    @field_validator("header_prefix")
    @classmethod
    def _short_header_prefix(cls, value: str) -> str:
        return at_most_bytes(value, MAX_HEADER_PREFIX_BYTES)


class SparkSettings(StrictModel):
    master: str | None = "local[2]"
    app_name: str = "outbox-relay"
    shuffle_partitions: int = Field(2, ge=1)
    # False on clusters (Databricks) where the JVM packages are cluster libraries.
    resolve_packages: bool = True
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("master")
    @classmethod
    def _empty_master_is_unset(cls, value: str | None) -> str | None:
        # TOML has no null: `master = ""` leaves the master to the cluster (Databricks),
        # where omitting the key would mean the local default.
        return value or None


class MetricsConfig(StrictModel):
    """Runtime metrics (outbox_relay.observe): served over HTTP by a continuous relay, pushed to
    a Pushgateway at the end of an available-now run and every push_interval_s while a
    continuous one runs. The Pushgateway's credentials, if any, come only from
    RELAY_PUSHGATEWAY_USERNAME and RELAY_PUSHGATEWAY_PASSWORD.
    Off unless a profile turns it on: a port is taken only where someone chose it."""

    enabled: bool = False
    host: str = Field("127.0.0.1", min_length=1)
    port: int = Field(9464, ge=1, le=65535)
    pushgateway_url: str | None = None
    pushgateway_timeout_s: float = Field(5.0, gt=0)
    # Well inside the push alerts' 20 minutes, and a continuous relay's success shows
    # within one interval (Databricks' drivers are scraped by nothing, so they push).
    push_interval_s: float = Field(15.0, gt=0)
    job: str = Field("outbox-relay", min_length=1)
    # The first N topics seen get a label of their own, the rest share `(other)`
    # (outbox_relay.observe.labels, for the counters and the exporter's gauges alike): a label
    # must not move once it exists, and 1,000s of topics would swamp Prometheus.
    max_label_topics: int = Field(DEFAULT_TOP_TOPICS, ge=1, le=100_000)
    # A relay of several databases: the first N keep a `database` label of their own, the
    # rest share `(other)` (outbox_relay.observe.databases), as topics do.
    max_label_databases: int = Field(DEFAULT_TOP_TOPICS, ge=1, le=100_000)

    @field_validator("pushgateway_url")
    @classmethod
    def _no_credentials_in_url(cls, value: str | None) -> str | None:
        if not value:
            return None  # TOML has no null: "" means no Pushgateway
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must look like http://host:port")
        if parts.username is not None or parts.password is not None:
            raise ValueError("credentials never go into the URL (set "
                             "RELAY_PUSHGATEWAY_USERNAME and RELAY_PUSHGATEWAY_PASSWORD)")
        return value
