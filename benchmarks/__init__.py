"""Benchmarks run by ``make bench`` (``python -m benchmarks``): scripts that
measure and print figures and write docs/benchmarks.md, not timed tests.

One module per figure (``launch``, ``claim``, ``memory``, ``throughput``),
each with ``NAME`` and ``run(settings) -> list[Row]``; ``common`` holds what
they share, ``peers`` the other session keepers, ``report`` the output.
"""
