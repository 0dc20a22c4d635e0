"""The commands, by module (the blocking ones in ``new``, for now)."""
