"""The saved arrangement: sessions in windows, tabs and splits (``_model``),
its file's tables, JSON and one private converter (``_schema``), the
file's making, checks and migrations (``_file``), the arrangement's rows,
one per session (``_rows``) and its layout read without attrs (``_tree``),
the SQLite store that keeps it with each session's scrollback
(``_store``), the light read of it (``_outline``), what is read back from
a damaged one (``_salvage``), its errors (``_errors``), and the hold
records of clients whose daemon died (``_held``). Its public names are in
``restore``'s face."""
