"""The randomized fault test (tests/pg/nemesis.py) in a short schedule.

Three nodes on a primary with a synchronous standby, each behind TCP proxies
to the database and to the upstream, clients retrying their keys, and a
schedule drawn from a seed: kill -9, cuts from the database and the upstream,
a mark whose reply is lost, 451 periods, the standby stopped, one failover.
Then every 250 must be delivered exactly once, with its QID, and nothing
refused delivered. NEMESIS_SEED picks another seed (the default is fixed, so
that a failure here replays); make nemesis runs long schedules.

PostgreSQL only (make test-pg).
"""

import os
import sys

from harness import PG_ONLY, REPO, case

sys.path.insert(0, os.path.join(REPO, "tests", "pg"))
import nemesis  # noqa: E402

SHORT_S = 75
SHORT_SEED = 172


@case(timeout=480, stores=PG_ONLY)
def test_nemesis_short(t):
    """A short schedule (75 s of faults, then quiesce and the history check)."""
    nemesis.run(t, int(os.environ.get("NEMESIS_S_SHORT") or SHORT_S),
                int(os.environ.get("NEMESIS_SEED") or SHORT_SEED))
