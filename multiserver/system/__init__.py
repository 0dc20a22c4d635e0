"""The OS seam: the runtime and state dirs and the lock (``_paths``),
which paths this user trusts (``_trust``), who is on the other end of a
socket (``_peer``), when a socket is stale (``_stale``), the platform's
waits, spawns and limits (``_platform``), and OS strings (``_osstr``).
Imports no other room (only ``multiserver._errors``). Modules import each
other by full path: nothing is re-exported here."""
