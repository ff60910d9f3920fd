"""`python -m chatcaps.cli`: the `chatcaps` command."""

import sys

from chatcaps.cli import main

sys.exit(main())
