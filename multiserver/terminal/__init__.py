"""What reaches a person's terminal: the one table of what draws
(``_draws``), terminal output read as a terminal reads it (``_ecma48``),
what a replay writes (``_replay``), the one terminal reset (``_screen``),
and the bounded buffer of a program's output, cut only where a terminal
can start reading it (``_buffer``: the daemon's, the attach client's and
the kept output's). Imports neither the protocol, the daemon nor a
client. Modules import each other by full path: nothing is re-exported
here."""
