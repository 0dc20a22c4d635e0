"""One module per command, as tmux has one file per command. Each holds
what ``main`` lists it by (``_args.Command``): its name, one line of help
and an example, its argument spec (``add_arguments``) beside what it
does (``run(args) -> exit status``; async for ``restore`` and
``orphans``, which run on trio).

Every command's spec is loaded for every command line, so a command
module imports at its top only what its spec needs; what it runs with
(the client, the store, the attach loop, trio, restore's engine) it
imports in ``run``. A command that does another's part calls it, as
``new -A`` attaches with ``attach``'s code.
"""
