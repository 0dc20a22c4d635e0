"""The saved arrangement: sessions in windows, tabs and splits (``_model``),
its JSON schema and one private converter (``_schema``), the SQLite store
that keeps it with each session's scrollback (``_store``), what is read
back from a damaged one (``_salvage``), its errors (``_errors``), and the
hold records of clients whose daemon died (``_held``). Its public names
are in ``restore``'s face."""
