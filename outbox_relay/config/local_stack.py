"""A profile's addresses given as "local-stack": the running local stack's (outbox_relay.stack).

`outbox-relay stack up` (and `make demo`) start PostgreSQL and Kafka on free ports, which
no profile can know, and a new shell has no `stack env` exported; so conf/local.toml names
the stack instead of a port, and loading asks the stack's state file (in RELAY_STACK_DIR,
else the checkout's .relay-data/stack) where they run. An address in the environment is
laid over the profile first, so it wins and no stack is looked for.
"""

from __future__ import annotations

from typing import Any

from outbox_relay.errors import NotRunningError

LOCAL_STACK = "local-stack"
# Each key that may name the stack, and the variable that names an address instead.
_ADDRESSES = (("postgres", "url", "RELAY_POSTGRES_URL"),
              ("kafka", "bootstrap_servers", "RELAY_KAFKA_BOOTSTRAP_SERVERS"))


def resolve_local_stack(data: dict[str, Any]) -> None:
    """Replace each "local-stack" address of `data` (a profile's tables, the environment
    laid over) with the running stack's, in place; NotRunningError if none runs."""
    named = [(section, key, var) for section, key, var in _ADDRESSES
             if isinstance(data.get(section), dict) and data[section].get(key) == LOCAL_STACK]
    if not named:
        return
    from outbox_relay import stack  # its modules are the stack's, not the relay's run's
    from outbox_relay.stack.paths import StackPaths

    info = stack.status(use_env=False)
    if info is None:
        keys = " and ".join(f"{s}.{k}" for s, k, _ in named)
        variables = " and ".join(var for _, _, var in named)
        raise NotRunningError(
            f"{keys} = \"{LOCAL_STACK}\", but no local stack is running in "
            f"{StackPaths.resolve().root}: start it with `outbox-relay stack up` (or `make "
            f"demo`), or give the address{'es' if len(named) > 1 else ''} in {variables}")
    found = {"postgres": info.postgres_url, "kafka": info.kafka_bootstrap}
    for section, key, _ in named:
        data[section][key] = found[section]
