"""Reads the Delta ledger without Spark, through deltalake (delta-rs): the commands that
only look (`ledger show`, `status`, `metrics serve`, the notebook) start no JVM.

Queries go through deltalake's QueryBuilder (DataFusion SQL), which reads what
delta-spark writes (deletion vectors and column mapping included, which deltalake's
pyarrow datasets refuse) and prunes files on their statistics. It takes no bound
parameters: callers format only integers into the text (`:d` cannot carry SQL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from outbox_relay.errors import ConfigError, RelayError, first_line

if TYPE_CHECKING:
    from deltalake import DeltaTable


def is_local(path: str) -> bool:
    """A path on this machine (no URL scheme, or file://), as opposed to object storage."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter


# Databricks' FUSE mounts on a driver: `/Volumes/...` (Unity Catalog Volumes) and
# `/dbfs/...`. They read like a local disk, but refuse the hard link that delta-rs commits
# with ("Function not implemented", delta-rs issue 2540), so delta-rs never writes there.
_DATABRICKS_MOUNTS = ("Volumes", "dbfs")


def delta_rs_writes(writer: str, path: str) -> bool:
    """Whether delta-rs, in the driver's Python, writes the ledger's copies (`ledger.writer`
    and `ledger.path`): `auto` picks it for a local path that is no Databricks mount.
    Spark's writer runs the ledger's Arrow partitioner in Python workers instead."""
    return writer == "delta-rs" or (writer == "auto" and is_local(path)
                                    and not on_databricks_mount(path))


def on_databricks_mount(path: str) -> bool:
    """A Databricks Volume or DBFS path: `/Volumes/...`, `/dbfs/...` or `dbfs:/...`."""
    url = urlparse(path)
    if url.scheme == "dbfs":
        return True
    if url.scheme not in ("", "file"):
        return False
    parts = PurePosixPath(url.path).parts
    return len(parts) > 1 and parts[0] == "/" and parts[1] in _DATABRICKS_MOUNTS


def table_uri(path: str) -> str:
    """A local path made absolute (as Spark resolves it, from the working directory);
    a URL (s3://, abfss://, file://) as it is."""
    return path if urlparse(path).scheme else str(Path(path).resolve())


def local_path(path: str) -> Path:
    """A local path (is_local) as a Path: a file:// URL's path, else the path itself."""
    return Path(urlparse(path).path if path.startswith("file:") else path)


def open_table(path: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """The Delta table at `path`, or None when nothing was copied there yet.

    A local path that holds files but no Delta log is refused: `ledger.path` names
    something else, and answering "no record" would hide that. On object storage an
    absent table and a non-Delta prefix look alike to delta-rs; both read as absent.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    if is_local(path):
        local = local_path(path)
        log = local / "_delta_log"
        if not local.exists() or (local.is_dir() and not any(local.iterdir())):
            return None
        if not local.is_dir() or not log.is_dir():
            raise ConfigError(f"ledger.path: {path} is not a Delta table (no _delta_log)")
        if not any(p.suffix in (".json", ".parquet") for p in log.iterdir()):
            return None  # a first copy that never committed
    try:
        return DeltaTable(table_uri(path), storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        if is_local(path):
            raise ConfigError(f"ledger.path: {path} is not a readable Delta table") from None
        return None
    except (DeltaError, OSError) as exc:
        raise RelayError(f"cannot read the Delta ledger at {path}: {first_line(exc)}") from None


def columns_of(table: DeltaTable) -> set[str]:
    return {f.name for f in table.schema().fields}


def query(table: DeltaTable, statement: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of `statement` over the table registered as `ledger`, as dicts of
    `columns`; a failed read is the relay's error, in one line."""
    from deltalake import QueryBuilder
    from deltalake.exceptions import DeltaError

    try:
        found = QueryBuilder().register("ledger", table).execute(statement).read_all()
    except (DeltaError, OSError) as exc:
        raise RelayError(f"cannot read the Delta ledger: {first_line(exc)}") from None
    values = [found.column(c).to_pylist() for c in columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]
