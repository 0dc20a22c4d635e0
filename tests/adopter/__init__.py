"""Tests of the orphan adopter (``adopter/``).

- ``test_policy``: the pure rules (classify, orphans, names, the adopted leaf)
  and the sinks' one-transaction record.
- ``test_sweep_harness``: the sweep and late arrivals against simulated
  daemons under trio's autojump clock.
- ``test_sweep_real``: the sweep and the CLI against real daemons (killed,
  stopped, planted sockets, an unsafe runtime dir).
"""
