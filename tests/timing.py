"""Time in tests: the deadlines they give, and the bounds they hold them to.

Simulated daemons (``multiserver.testing``) run under trio's autojump clock,
where time is exact:

- ``HARNESS_TIMEOUT``: the deadline a harness test gives a restore. It is
  no default of anything, so a restore that ignores the deadline it is
  given, and uses a default instead, misses it.
"""

from __future__ import annotations

# A harness test's restore deadline: none of restore's (10 s), the login
# service's (5 s) or a host's (15 s), nor any phase of those (80 %: 8, 4,
# 12 s; 25 %: 2.5, 1.25, 3.75 s), nor the sweep's bound (2 s). Its phase
# ends at 6 s, exact in binary.
HARNESS_TIMEOUT = 7.5
