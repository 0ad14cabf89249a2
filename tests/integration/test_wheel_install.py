"""The project's wheel, installed as a cluster installs a library: into a Python that
already holds the runtime's PySpark, Delta, pyarrow and pandas.

`python -m build --wheel` makes the wheel. A fresh venv gets the runtime's packages first
(pyspark and delta-spark at outbox_relay/launch/packages.py's versions, pyarrow and pandas at this
environment's); installing the wheel and its [relay] extra as the bundle does (the wheel,
and requirements/relay.txt beside it) must change none of them, and the wheel must
require nothing unconditionally. Then that venv drains a seeded outbox with the
INSTALLED relay (its `outbox-relay` entry point, from a directory outside the checkout,
without PYTHONPATH), the jars coming from the local cache as a cluster's libraries do.
"""

from __future__ import annotations

import subprocess
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from outbox_relay.exit_codes import ExitCode
from outbox_relay.launch.packages import DELTA_VERSION, SPARK_VERSION
from outbox_relay.launch.spark_jars import cached_jars
from outbox_relay.stack import StackInfo
from tests.bundle import REPO
from tests.integration.conftest import ConfigFactory
from tests.integration.helpers import (
    consume,
    create_topics,
    every_key_shape,
    insert,
    order_report,
    query,
    unique,
)
from tests.integration.process import write_profile
from tests.integration.wheel import (
    installed,
    new_venv,
    pip_install,
    run_ok,
    wheel_requires,
)

pytestmark = pytest.mark.integration

RELAY_EXTRA = {"confluent-kafka", "deltalake", "prometheus-client", "psycopg2-binary",
               "pydantic", "pydantic-settings"}
# What the bundle's tasks install beside the wheel (resources/outbox_relay.job.yml).
RELAY_REQUIREMENTS = REPO / "requirements" / "relay.txt"
MESSAGES = 60
# What a runtime ships; pip must leave every one of them as it found it.
RUNTIME = (f"pyspark=={SPARK_VERSION}", f"delta-spark=={DELTA_VERSION}",
           f"pyarrow=={version('pyarrow')}", f"pandas=={version('pandas')}")


def test_the_installed_wheel_keeps_the_runtime_and_drains(
    stack: StackInfo, make_config: ConfigFactory, migrated_url: str, project_wheel: Path,
    tmp_path: Path
) -> None:
    started = time.monotonic()
    wheel = project_wheel
    unconditional = {canonicalize_name(r.name) for r in wheel_requires(wheel)
                     if r.marker is None}
    assert unconditional == set()

    venv, outside = tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    python, env = new_venv(venv, outside)
    pip_install(python, *RUNTIME, cwd=outside, env=env)
    before = installed(python, outside, env)
    pip_install(python, wheel, "-r", RELAY_REQUIREMENTS, cwd=outside, env=env)
    after = installed(python, outside, env)
    changed = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert not changed, f"pip changed the runtime's packages: {changed}"
    assert set(after) - set(before) >= RELAY_EXTRA | {"outbox-relay"}
    installed_in = time.monotonic() - started

    where = run_ok(python, "-c", "import outbox_relay; print(outbox_relay.__file__)",
                   cwd=outside, env=env)
    assert Path(where.strip()).is_relative_to(venv), where

    topic = unique("wheel")
    create_topics(stack.kafka_bootstrap, {topic: 2})
    # Every key shape: partition_key NULL, equal to the key, different; NULL and binary keys.
    messages = every_key_shape([topic], MESSAGES)
    ids = insert(migrated_url, [messages])
    jars = ",".join(str(p) for p in cached_jars())
    config = make_config([topic], name="wheel",
                         spark={"resolve_packages": False, "conf": {"spark.jars": jars}})
    profile = write_profile(config, tmp_path / "wheel.toml")
    done = subprocess.run([str(venv / "bin" / "outbox-relay"), "--config", str(profile), "run",
                           "--available-now"], cwd=outside, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == ExitCode.OK, done.stdout[-2000:] + done.stderr[-3000:]

    received = consume(stack.kafka_bootstrap, [topic], expect=MESSAGES)
    assert {r.outbox_id for r in received} == set(ids)
    inversions, spread, _ = order_report(dict(zip(ids, messages, strict=True)), received)
    assert (inversions, spread) == (0, 0), "per-key order"
    assert query(migrated_url, "SELECT count(*) FROM kafka_messages") == [(0,)]
    print(f"wheel built and installed in {installed_in:.1f} s, "
          f"whole test {time.monotonic() - started:.1f} s")
