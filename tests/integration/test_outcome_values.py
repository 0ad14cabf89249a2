"""The ledger outcomes the database accepts are exactly outbox_relay.rules.outcomes.Outcome.

Read back from the migrated database's CHECK constraints (schemas 0006, 0012), not from
the files: a value either side lacks would fail a ledger insert at run time.
"""

from __future__ import annotations

import re

import psycopg2
import pytest

from outbox_relay.rules.outcomes import OPERATOR_OUTCOMES, Outcome

pytestmark = pytest.mark.integration

CONSTRAINT = """
SELECT pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'relay_ledger_staging'::regclass AND conname = %s
"""


def _values(migrated_url: str, name: str) -> set[str]:
    with psycopg2.connect(migrated_url) as conn, conn.cursor() as cur:
        cur.execute(CONSTRAINT, (name,))
        (definition,) = cur.fetchone()
    conn.close()
    return set(re.findall(r"'([^']*)'::character varying", definition))


def test_the_outcome_check_holds_every_outcome_and_no_other(migrated_url: str) -> None:
    assert _values(migrated_url, "relay_ledger_staging_outcome_check") == set(Outcome)


def test_the_outcomes_that_need_an_actor_are_the_operators(migrated_url: str) -> None:
    assert _values(migrated_url, "relay_ledger_staging_actor_check") == set(OPERATOR_OUTCOMES)
