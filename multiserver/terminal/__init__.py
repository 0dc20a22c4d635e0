"""What reaches a person's terminal: the one table of what draws
(``_draws``), terminal output read as a terminal reads it (``_ecma48``),
what a replay writes (``_replay``) and the one terminal reset
(``_screen``). Imports neither the protocol, the daemon nor a client.
Modules import each other by full path: nothing is re-exported here."""
