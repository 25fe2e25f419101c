"""``python -m consumer.cli``: the ``turnflow`` command, for a child process of the same
interpreter (the supervisor's workers, the tests)."""

import sys

from consumer.cli import main

sys.exit(main())
