"""Layouts: the windows, tabs and splits a person sees, read from their
terminal and opened in it again. ``_layout`` is pure (the plan of
operations, tmux's layout strings, kitty's pairs); ``_tmux`` and
``_kitty`` drive a real terminal through its control commands
(``_terminals``: running them, bounded, and the process tree a pane
shows). Its public names are in ``restore``'s face."""
