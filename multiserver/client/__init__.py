"""The clients of a daemon: the trio one (``_client``), the blocking one
(``_sync``, which imports no trio, attrs or cattrs), connect-or-start
(``_spawn``: the steps and their blocking driver; ``_start``: their trio
driver), each request once (``_calls``), what requests return
(``_results``), and observers of the blocking handshake (``_hooks``).
Modules import each other by full path: nothing is re-exported here."""
