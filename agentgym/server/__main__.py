"""``python -m agentgym.server``: see :mod:`agentgym.server.main`."""

import sys

from agentgym.server.main import main

sys.exit(main())
