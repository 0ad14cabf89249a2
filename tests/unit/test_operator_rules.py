"""Pure rules of the operators' ledger records: who acted, and the staged partition."""

from __future__ import annotations

import pytest

from outbox_relay.control.skipping import actor
from outbox_relay.ledger.staging import kafka_partition
from outbox_relay.rules.partitioners import partition_for


def test_the_actor_is_the_user_at_the_host() -> None:
    assert actor(env={}, user="alice", host="ops-1") == "alice@ops-1"


def test_behind_sudo_the_actor_is_the_person_and_says_as_whom() -> None:
    env = {"SUDO_USER": "alice"}
    assert actor(env=env, user="root", host="ops-1") == "alice@ops-1 (as root)"
    assert actor(env={"SUDO_USER": "root"}, user="root", host="h") == "root@h"


def test_the_actor_of_this_process_names_this_host() -> None:
    import socket

    assert f"@{socket.gethostname()}" in actor()


@pytest.mark.parametrize("partitioner", ["murmur2", "crc32"])
def test_a_staged_partition_is_the_partitioners_for_keyed_rows_only(partitioner: str) -> None:
    assert kafka_partition(partitioner, b"order-7", 6) == partition_for(partitioner, b"order-7", 6)
    assert kafka_partition(partitioner, b"", 6) == partition_for(partitioner, b"", 6)
    assert kafka_partition(partitioner, None, 6) is None  # keyless: the producer chose
    assert kafka_partition(partitioner, b"k", None) is None


def test_a_record_from_before_partitions_were_staged_has_none() -> None:
    assert kafka_partition(None, b"k", 3) is None
