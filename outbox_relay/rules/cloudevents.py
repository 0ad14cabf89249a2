"""CloudEvents on the wire: the Kafka protocol binding's binary mode.

A topic whose rule sets `cloudevents = true` carries, on each record, the attributes of
the CloudEvents Kafka binding as headers: `ce_specversion`, `ce_id`, `ce_source`,
`ce_time` (written by the relay, never by the application), `ce_type` (the application's,
stored in the row's headers by the publisher's `event_type=`, or the rule's default
type), and `content-type` when the application gave one (`content_type=`). The relay's
own reserved headers stay beside them.

The names live here once: the publisher (outbox_relay.outbox.checks) stores the application's
two, the data plane (outbox_relay.data.records) writes the relay's, and the size checks (the
publisher's, the claim's and the one before sending) count the relay's through
`added_header_bytes`.
"""

from __future__ import annotations

from outbox_relay.rules.headers import CREATED_AT_CHARS
from outbox_relay.rules.record_size import ID_CHARS, header_bytes

SPEC_VERSION = "1.0"
CE_SPECVERSION = "ce_specversion"
CE_ID = "ce_id"
CE_SOURCE = "ce_source"
CE_TIME = "ce_time"
CE_TYPE = "ce_type"
CONTENT_TYPE = "content-type"  # the binding's header for the datacontenttype attribute

# The attributes the relay writes on a CloudEvents topic: an application's header of one
# of these names would give a consumer two values, so it is refused.
RELAY_ATTRIBUTES = (CE_SPECVERSION, CE_ID, CE_SOURCE, CE_TIME)


def added_header_bytes(source_name: str, default_type: str | None = None) -> int:
    """The bytes the relay adds to a record of a CloudEvents topic, framing included, for
    the longest id and time: the relay's four attributes, and `ce_type` when a rule's
    default type may be added to a row that has none."""
    added = (
        header_bytes(CE_SPECVERSION, len(SPEC_VERSION))
        + header_bytes(CE_ID, ID_CHARS)
        + header_bytes(CE_SOURCE, len(source_name.encode()))
        + header_bytes(CE_TIME, CREATED_AT_CHARS)
    )
    if default_type is not None:
        added += header_bytes(CE_TYPE, len(default_type.encode()))
    return added
