"""Test-session setup shared by every tier."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# cisl's run locks live in one folder per machine, and the board locks are keyed by probe serial and port:
# tests that use the same fake probes in parallel workers (or two test sessions at once) would refuse each
# other. Every test process gets a lock folder of its own; the commands it starts inherit it.
_LOCKS = tempfile.mkdtemp(prefix="cisl-test-locks-")
os.environ["CISL_LOCK_DIR"] = _LOCKS
atexit.register(shutil.rmtree, _LOCKS, True)
