"""Being a session's terminal: the attached client, module by module.

- ``_attached``: one attachment (its session claimed): the replay, the
  daemon's notices and the signals watched, then release or collect;
- ``_proxy``: the copy loop, terminal <-> the session's PTY (or its feed,
  while other clients share it), in a thread of its own;
- ``_screen``: the terminal as the attach writes to it (what it showed,
  the replay, the reset, raw mode);
- ``_watch``: the attachment's other loop: the daemon's notices, signals,
  giving reading back;
- ``_terminal``: what is written to the terminal and let through from it
  (pure: queries stripped from a replay, answers dropped, the reset);
- ``_tty``: the terminal the attach draws on, a tty here or one relayed
  over ssh;
- ``_relay`` and ``_relay_codec``: that relay, both of its ends;
- ``_over_ssh``: ``attach HOST:NAME``, this terminal attached to another
  host's session through ssh, reconnecting after a drop;
- ``_daemon_gone``: an attached session whose daemon dies;
- ``_keys``: the detach key, and finding it in what a terminal sends;
- ``_typed``: what is typed, on its way to the program.

Nothing is imported here: a command that only reads the detach key loads
``_keys`` alone.
"""
