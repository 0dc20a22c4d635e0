"""The daemon: the process that owns the sessions. Its main
(``_daemon_main``, run by ``python -m multiserver``), the listener and idle
watch (``_server``), one client's connection (``_connection``), the pure
request core (``_core``), the children on their PTYs (``_children``,
``_keeping``, ``_openfiles``, ``_fds``), its lock and socket (``_files``,
``_origin``), and the upgrade in place (``_upgrade``, ``_snapshot``).
Never imports a client. Modules import each other by full path: nothing
is re-exported here."""
