"""`python -m outbox_relay.cli`: the `outbox-relay` console script without its installed wrapper."""

import sys

from outbox_relay.cli import main

sys.exit(main())
