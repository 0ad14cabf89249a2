"""Every ```python block of docs/publishing.md runs, each in a fresh migrated database.

The page's convention: a runnable block takes the URL from os.environ["DATABASE_URL"],
may use the application table `orders (id int primary key, total numeric)`, and runs
async code with asyncio.run. A block after `<!-- not run: <reason> -->` is left out by the
extractor (tests/integration/doc_snippets.py); the pytest file of "Testing what your
application publishes" is one, run by tests/integration/test_outbox_plugin.py.
Each block runs in a Python process of its own (a block may set process-wide state,
such as OpenTelemetry's tracer provider), with the venv's interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest

from tests.integration.doc_snippets import Block, runnable

pytestmark = pytest.mark.integration

PAGE = "publishing.md"
ORDERS = "CREATE TABLE orders (id int PRIMARY KEY, total numeric)"
# A block that calls a publisher and neither rolls back nor expects an error leaves
# committed rows behind; the others may leave none.
PUBLISHES = re.compile(r"\bpublish(_many)?(_async)?\(")
KEEPS_NOTHING = re.compile(r"rollback|except|raises")

BLOCKS = runnable(PAGE)


def test_the_page_has_runnable_blocks() -> None:
    assert len(BLOCKS) >= 2, f"{PAGE} has {len(BLOCKS)} runnable python blocks"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_runs(block: Block, migrated_url: str, tmp_path: Path) -> None:
    with psycopg2.connect(migrated_url) as conn, conn.cursor() as cur:
        cur.execute(ORDERS)
    conn.close()
    script = tmp_path / f"block_{block.number}.py"
    script.write_text(block.code, encoding="utf-8")
    env = {**os.environ, "DATABASE_URL": migrated_url}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (
        f"block {block.id} exited {done.returncode}:\n{block.code}\n{done.stderr}")
    if block.prints is not None:
        assert done.stdout == block.prints
    rows, malformed = _outbox_rows(migrated_url)
    assert malformed == 0, f"block {block.id} left rows with headers not a JSON object"
    if PUBLISHES.search(block.code) and not KEEPS_NOTHING.search(block.code):
        assert rows > 0, f"block {block.id} publishes, yet kafka_messages is empty"


def _outbox_rows(url: str) -> tuple[int, int]:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*), count(*) FILTER (WHERE headers IS NOT NULL "
                        "AND jsonb_typeof(headers) <> 'object') FROM kafka_messages")
            total, malformed = cur.fetchone()
        return int(total), int(malformed)
    finally:
        conn.close()
