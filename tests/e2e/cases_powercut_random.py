"""The randomized power-cut runner (tests/powerfs/powercut.py) in a short schedule.

One daemon on LMDB on tests/powerfs, clients submitting new keys and retries
of earlier ones (1-4 recipients, ~300 octets to ~1.1 MB) through rounds drawn
from a seed: store.map_size changed between starts, bigger or smaller, a map
that fills (452), SIGHUP, SIGTERM, kill -9, power cuts with or without a part
of the unsynced pages written back, a start cut by another. Then every 250
must survive with its QID and reach the sink once, nothing refused delivered,
and the daemon must have started every time. POWERCUT_SEED picks another
seed (the default is fixed, so that a failure here replays); the long runs
are python3 tests/powerfs/powercut.py (make powercut).

LMDB only; needs root and /dev/fuse, as cases_powercut.py.
"""

import os
import sys

from harness import LMDB_ONLY, REPO, case

sys.path.insert(0, os.path.join(REPO, "tests", "powerfs"))
import powercut  # noqa: E402

SHORT_ROUNDS = 5
SHORT_SEED = 1051
SHORT_S = 30


@case(timeout=120, stores=LMDB_ONLY)
def test_powercut_random_short(t):
    """Five rounds of seed 1051: a map of 24M filled (452s) and drained, a
    start cut at a sync (compacting it), bigger maps, then 64M and 24M after
    cuts (smaller), cuts with nothing, a part, a part at a sync written back."""
    powercut.run(t, int(os.environ.get("POWERCUT_SEED") or SHORT_SEED),
                 SHORT_ROUNDS, SHORT_S)
