"""`python -m relay.cli`: the `outbox-relay` console script without its installed wrapper."""

import sys

from relay.cli import main

sys.exit(main())
