# Databricks notebook source
# MAGIC %md
# MAGIC # Outbox health
# MAGIC
# MAGIC What an on-call engineer asks of the outbox, as figures: the backlog per topic, the
# MAGIC age of each topic's oldest waiting message, topic states and their last errors,
# MAGIC messages per minute over the last 24 hours (from the ledger), parked messages by
# MAGIC reason, and where one message is.
# MAGIC
# MAGIC It reads only (PostgreSQL, and the Delta ledger through `deltalake`: no Spark) and
# MAGIC starts no relay. Each figure is written as a PNG with a JSON file of its data beside
# MAGIC it. On Databricks the connection comes from the widgets above (the password from a
# MAGIC secret); run as a plain script (`python notebooks/outbox_health.py`) it comes from
# MAGIC the environment, as the relay's own commands read it: `RELAY_CONFIG` (a profile),
# MAGIC `RELAY_POSTGRES_URL`, `RELAY_POSTGRES_PASSWORD`, `RELAY_LEDGER_PATH`, and
# MAGIC `RELAY_NOTEBOOK_OUT`, `RELAY_NOTEBOOK_MAX_AGE_S`, `RELAY_NOTEBOOK_MESSAGE_ID`.
# MAGIC
# MAGIC Needs the `outbox-relay` wheel on the cluster; matplotlib ships with Databricks
# MAGIC runtimes.

# COMMAND ----------

import json
import os
from typing import Any

from outbox_relay.config.load import PASSWORD_ENV, build_config, load_config
from outbox_relay.control.db import Database
from outbox_relay.control.migrate import require_current
from outbox_relay.observe import health, plots, queries
from outbox_relay.observe.message_lookup import find_message
from outbox_relay.observe.report import table
from outbox_relay.observe.status import take_snapshot
from outbox_relay.observe.throughput import per_minute

# Databricks puts dbutils and display in the notebook's globals; a script has neither.
dbutils = globals().get("dbutils")
display = globals().get("display")

DEFAULT_OUT = ".relay-data/notebook"
DATABRICKS_OUT = "/Volumes/main/outbox_relay/state/notebook"
DEFAULT_MAX_AGE_S = "300"


def widget(name: str, default: str, label: str) -> str:
    """A widget's value, the widget made with `default` on the first run."""
    dbutils.widgets.text(name, default, label)
    return dbutils.widgets.get(name).strip()


def settings() -> dict[str, Any]:
    if dbutils is not None:
        scope = widget("secret_scope", "outbox-relay", "Secret scope")
        key = widget("secret_key", "postgres-password", "Secret key (PostgreSQL password)")
        raw: dict[str, Any] = {"postgres": {"url": widget(
            "postgres_url", "postgresql://outbox_relay@postgres.example.com:5432/app",
            "PostgreSQL URL (no password)")}}
        ledger = widget("ledger_path", "/Volumes/main/outbox_relay/state/ledger", "Ledger path")
        if ledger:
            raw["ledger"] = {"path": ledger}
        env = {PASSWORD_ENV: dbutils.secrets.get(scope, key)} if scope and key else {}
        return {
            "config": build_config(raw, env=env),
            "out": widget("output_folder", DATABRICKS_OUT, "Output folder"),
            "max_age_s": widget("max_age_s", DEFAULT_MAX_AGE_S, "Max age threshold (s)"),
            "message_id": widget("message_id", "", "Message id to look up"),
        }
    return {
        "config": load_config(os.environ.get("RELAY_CONFIG") or None),
        "out": os.environ.get("RELAY_NOTEBOOK_OUT") or DEFAULT_OUT,
        "max_age_s": os.environ.get("RELAY_NOTEBOOK_MAX_AGE_S", DEFAULT_MAX_AGE_S),
        "message_id": os.environ.get("RELAY_NOTEBOOK_MESSAGE_ID", ""),
    }


SETTINGS = settings()
CONFIG = SETTINGS["config"]
OUT = SETTINGS["out"]
MAX_AGE_S = float(SETTINGS["max_age_s"]) if SETTINGS["max_age_s"] else None
written: list[str] = []


def show(name: str, fig: Any, data: dict[str, Any]) -> None:
    """Writes the PNG and its JSON, and shows the figure in a notebook."""
    written.append(str(plots.save(fig, data, OUT, name)))
    if display is not None:
        display(fig)


db = Database(CONFIG.postgres, "outbox-relay-notebook")
require_current(db)  # an older schema: one line saying to migrate, not a missing column
snapshot = take_snapshot(db, CONFIG.relay.lock_timeout_s, CONFIG.ledger.path)
print(table(snapshot))  # what `outbox-relay status` prints

# COMMAND ----------

# MAGIC %md
# MAGIC ## Backlog per topic
# MAGIC Exact up to 100,000 rows a topic, estimated beyond (hatched, `~`); the largest
# MAGIC topics, the rest summed as `other`.

# COMMAND ----------

data = health.backlog(snapshot)
show("backlog", plots.backlog(data), data)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Oldest waiting message per topic
# MAGIC Against the `max_age_s` threshold (the `outbox-relay status --max-age-s` check).

# COMMAND ----------

data = health.oldest_age(snapshot, MAX_AGE_S)
show("oldest_age", plots.oldest_age(data), data)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Topic states and last errors
# MAGIC Topics in backoff first, then locked ones (is the lock's holder alive?), then the rest.

# COMMAND ----------

data = health.states(snapshot)
show("states", plots.states(data), data)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Messages per minute, last 24 hours
# MAGIC From the ledger: the records still staged in PostgreSQL and the Delta table, each
# MAGIC message counted once. The ten busiest topics, the rest as `other`.

# COMMAND ----------

data = health.throughput(per_minute(db, CONFIG.ledger.path))
show("throughput", plots.throughput(data), data)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Parked messages by reason
# MAGIC Numbers in a reason (ids, sizes) read as `N`, so one cause is one bar.
# MAGIC `outbox-relay parked list` shows the messages.

# COMMAND ----------

data = health.parked(db.all(queries.PARKED_BY_REASON), snapshot.generated_at)
show("parked", plots.parked(data), data)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Where is message X?
# MAGIC Set the `message_id` widget (`RELAY_NOTEBOOK_MESSAGE_ID`): waiting in the outbox,
# MAGIC parked, or relayed (the ledger's staged records and the Delta table), with its
# MAGIC Kafka partition: the same answer as `outbox-relay ledger show --id X`.

# COMMAND ----------

if SETTINGS["message_id"] and not SETTINGS["message_id"].isdigit():
    print(f"message id {SETTINGS['message_id']!r} is not a number: nothing looked up")
elif SETTINGS["message_id"]:
    found = health.lookup(find_message(db, CONFIG.ledger.path, int(SETTINGS["message_id"])))
    print(found["summary"])
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "lookup.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(found, f, indent=2, default=str)
    written.append(path)
else:
    print("no message id given")

# COMMAND ----------

db.close()
print("wrote", *written, sep="\n  ")
