"""Simulated multiserver daemons for your tests: no processes, no PTYs, no threads.

A ``SimDaemon`` speaks the real protocol (the real codec and wire layer) on a
real Unix socket bound in a directory your test gives, so the real client
library connects to it unchanged with ``open_client(path)``. Its children are
``SimChild`` objects: the "PTY master" a client receives is one end of a
``socket.socketpair``, and the test holds the other end as the child's side.
Everything runs in the test's own trio task tree and in-process socket I/O
completes in the kernel at once, so tests run under trio's autojump clock: a
30 s simulated delay takes no wall time. ``Behavior`` makes a daemon slow,
wedged or broken, per message type.

Example (pytest-trio; ``autojump_clock`` is pytest-trio's own fixture)::

    import trio
    from multiserver import open_client
    from multiserver.testing import Behavior, Claim, SimDaemon

    async def test_claim_gives_up_on_a_wedged_daemon(tmp_path, autojump_clock):
        sim = SimDaemon(tmp_path / "d.sock", behavior=Behavior.on(Claim, hang=True))
        sim.add_child(["bash"], name="editor")
        async with sim.serving(), open_client(sim.socket_path) as client:
            with trio.move_on_after(5) as scope:
                await client.claim([1])
            assert scope.cancelled_caught  # after 5 virtual seconds

fd ownership: each ``SimChild`` owns both ends of its socketpair; a client gets
a dup of the master end (sent with SCM_RIGHTS) and owns that copy. Every fd the
harness created is closed when ``serve`` returns (or by ``close()`` for a
daemon that never served). See docs/testing.md for what is not simulated.
"""

# The messages a client sends, re-exported to key a Behavior's rules.
from multiserver.protocol._messages import (
    Claim as Claim,
    Collect as Collect,
    Hello as Hello,
    Launch as Launch,
    ListChildren as ListChildren,
    Peek as Peek,
    Release as Release,
    Resize as Resize,
    Shutdown as Shutdown,
    Signal as Signal,
    Watch as Watch,
)
from multiserver.testing._behavior import (
    Behavior as Behavior,
    Rule as Rule,
)
from multiserver.testing._children import (
    SimChild as SimChild,
)
from multiserver.testing._daemon import (
    SimDaemon as SimDaemon,
)
