"""Benchmarks run by ``make bench`` (``python -m benchmarks``): scripts that
measure and print figures and write docs/benchmarks.md, not timed tests.

One module per figure (``throughput``, ``attached``, ``echo``, ``launch``,
``claim``, ``memory``, ``reattach``, ``restoring``, ``drain``), each with
``NAME`` and ``run(settings) -> list[Row]``. ``results`` holds the rows,
targets and statistics; ``common`` the scratch dirs, processes and daemons
they share; ``peers`` the other session keepers; ``terminal`` the user's
side of an attached session (an outer PTY and a fast reader); ``report``
the output (with ``findings.md``: what profiles showed about missed
targets).
"""
