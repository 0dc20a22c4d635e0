"""``python -m multiserver_cli``: the ``multiserver`` command, where its
script is not beside the interpreter (what a service runs then)."""

from multiserver_cli.main import main

if __name__ == "__main__":
    main()
