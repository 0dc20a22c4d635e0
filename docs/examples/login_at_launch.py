"""A terminal app's launch: the saved sessions brought back through the
login procedure (``adopter.open_login``), each step printed as it comes.
docs/restore.md shows it; tests/adopter/test_login_real.py runs it.

    python docs/examples/login_at_launch.py
"""

import os

import trio

from adopter import Arrived, Done, Restoring, SessionRestored, Swept, WaitingForLock, open_login


async def main() -> None:
    async with open_login(timeout=5.0) as events:  # the deadline is yours
        async for event in events:
            match event:
                case WaitingForLock(holder=pid):
                    print(f"waiting for another restore (pid {pid})")
                case Restoring(sessions=n, daemons=d, timeout=t):
                    print(f"restoring {n} sessions of {d} daemons within {t:g} s")
                case Arrived(socket=socket, reached=True, elapsed=seconds):
                    print(f"{os.path.basename(socket)}: answered in {seconds:.3f} s")
                case Arrived(socket=socket, error=why):
                    print(f"{os.path.basename(socket)}: {why}")
                case SessionRestored(row=row):
                    print(f"{row.name}: {row.outcome} ({row.detail})")
                case Swept(rows=rows):
                    adopted = [r.name for r in rows if r.action == "adopted"]
                    print(f"adopted: {', '.join(adopted) or 'nothing'}")
                case Done(report=report):
                    print("every session is back" if report.ok else "some sessions failed")
        # Still under the restore lock: open the app's windows here, each
        # attaching to its session (they are their daemons' again).


trio.run(main)
