"""``python -m multiserver``: the detached daemon, as started by a client."""

from multiserver.daemon._daemon_main import main

if __name__ == "__main__":
    main()
