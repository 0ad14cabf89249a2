"""How the runtime metrics leave the process: /metrics over HTTP while a continuous relay
runs, and, with a Pushgateway configured, a push when an available-now run ends or every
metrics.push_interval_s while a continuous one runs (a Databricks driver's /metrics is
scraped by nothing)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
from prometheus_client.exposition import basic_auth_handler, default_handler

from outbox_relay.config import MetricsConfig
from outbox_relay.errors import ConfigError

log = logging.getLogger(__name__)

PUSHGATEWAY_USERNAME_ENV = "RELAY_PUSHGATEWAY_USERNAME"
PUSHGATEWAY_PASSWORD_ENV = "RELAY_PUSHGATEWAY_PASSWORD"

Handler = Callable[..., Callable[[], None]]


@contextmanager
def exported(config: MetricsConfig, registry: CollectorRegistry, available_now: bool,
             instance: str) -> Iterator[None]:
    """Serves `registry` on config.host:config.port while a continuous run lasts, and
    pushes it while it lasts when a Pushgateway is configured; pushes it at the end of
    every run that has a Pushgateway."""
    if not config.enabled:
        yield
        return
    server = None if available_now else serve(config, registry)
    pusher = None
    if not available_now and config.pushgateway_url:
        pusher = PeriodicPush(config, registry, instance)
    try:
        yield
    finally:
        if pusher is not None:
            pusher.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        if config.pushgateway_url:
            push(config, registry, instance)


class PeriodicPush:
    """Pushes at once, then every config.push_interval_s, from a daemon thread (it dies
    with the driver). Failures are logged when pushing starts or stops failing, not at
    every interval: an unreachable Pushgateway shows in OutboxRelayDrainPushStale."""

    def __init__(self, config: MetricsConfig, registry: CollectorRegistry,
                 instance: str) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(config, registry, instance),
                                        name="outbox-relay-metrics-push", daemon=True)
        self._thread.start()
        log.info("pushing the metrics to the Pushgateway %s every %g s (job %s, instance %s)",
                 config.pushgateway_url, config.push_interval_s, config.job, instance)

    def _loop(self, config: MetricsConfig, registry: CollectorRegistry, instance: str) -> None:
        failing = False
        while True:
            error = _push_once(config, registry, instance)
            if error is not None and not failing:
                log.warning("could not push the metrics to the Pushgateway %s (trying again "
                            "every %g s): %s", config.pushgateway_url,
                            config.push_interval_s, error)
            elif error is None and failing:
                log.info("metrics pushed to the Pushgateway %s again", config.pushgateway_url)
            failing = error is not None
            if self._stopped.wait(config.push_interval_s):
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def serve(config: MetricsConfig, registry: CollectorRegistry) -> Any:
    """Starts the /metrics server in a daemon thread; returns the server (shutdown() it).
    A port that cannot be bound is a configuration error: a relay that an operator
    asked to expose metrics must not run on without them, unseen."""
    try:
        server, _thread = start_http_server(config.port, config.host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"invalid config key metrics.port: cannot listen on "
                          f"{config.host}:{config.port}: {exc.strerror or exc}") from None
    log.info("metrics served on http://%s:%d/metrics", config.host, config.port)
    return server


def push(config: MetricsConfig, registry: CollectorRegistry, instance: str,
         env: dict[str, str] | None = None) -> bool:
    """Pushes `registry` (replacing this job and instance's group); returns whether it
    went through. A failure is logged and goes no further: the exit code tells a
    scheduler whether the outbox drained, and a drain that succeeded must not be
    retried because monitoring was unreachable (a stale push shows in the
    no-success alert instead)."""
    error = _push_once(config, registry, instance, env)
    if error is not None:
        log.warning("could not push the metrics to the Pushgateway %s: %s",
                    config.pushgateway_url, error)
        return False
    log.info("metrics pushed to the Pushgateway %s (job %s, instance %s)",
             config.pushgateway_url, config.job, instance)
    return True


def _push_once(config: MetricsConfig, registry: CollectorRegistry, instance: str,
               env: dict[str, str] | None = None) -> Exception | None:
    """One push; what made it fail, or None."""
    assert config.pushgateway_url is not None
    try:
        push_to_gateway(config.pushgateway_url, job=config.job, registry=registry,
                        grouping_key={"instance": instance},
                        timeout=config.pushgateway_timeout_s, handler=_handler(env))
    except Exception as exc:  # any failure of the push: monitoring only
        return exc
    return None


def _handler(env: dict[str, str] | None) -> Handler:
    """Basic auth when the environment holds the Pushgateway's credentials."""
    env = dict(os.environ) if env is None else env
    username, password = env.get(PUSHGATEWAY_USERNAME_ENV), env.get(PUSHGATEWAY_PASSWORD_ENV)
    if not username and not password:
        return default_handler

    def handler(url: str, method: str, timeout: float | None, headers: list[tuple[str, str]],
                data: bytes) -> Callable[[], None]:
        return basic_auth_handler(url, method, timeout, headers, data, username, password)

    return handler
