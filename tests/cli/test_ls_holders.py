"""``multiserver ls``'s HELD: how many clients hold a session, the
read-only ones said apart (``3 (1 ro)``), and ``ls --json``'s ``holders``
and ``watchers``; a daemon before sharing (protocol 8) says only
``held``, shown as one holder."""

from __future__ import annotations

import json

import trio

from multiserver import ChildInfo, Client, GiveBack, open_client
from multiserver_cli._format import held_text, holding, ls_table
from restore.remote._listing import read_listing
from tests.cli.conftest import ms, older_daemon
from tests.conftest import MsDirs, RunningDaemon, close_fd


def child(held: bool, holders: int = 0, watchers: int = 0) -> ChildInfo:
    return ChildInfo(
        id=1,
        pid=2,
        name="s",
        argv=["cat"],
        cwd="/",
        tty="/dev/pts/1",
        rows=30,
        cols=100,
        state="running",
        exit_code=None,
        held=held,
        buffered_bytes=0,
        dropped_bytes=0,
        started_at=0.0,
        exited_at=None,
        linger=None,
        holders=holders,
        watchers=watchers,
    )


def test_held_is_a_count_with_the_read_only_ones_apart() -> None:
    assert [held_text(*holding(c)) for c in (child(False), child(True, 1), child(True, 2))] == [
        "-",
        "1",
        "2",
    ]
    assert held_text(*holding(child(True, 3, 1))) == "3 (1 ro)"
    assert held_text(*holding(child(True, 1, 1))) == "1 (1 ro)"  # a watcher alone
    # A daemon before sharing says held, no counts: one holder.
    assert holding(child(True)) == (1, 0) and held_text(1, 0) == "1"
    table = ls_table([child(True, 3, 1)], 0.0).splitlines()
    assert table[0].split()[:3] == ["NAME", "STATE", "HELD"]
    assert table[1][table[0].index("HELD") :].startswith("3 (1 ro)  ")


async def held_column(ms_dirs: MsDirs) -> dict[str, str]:
    """``ls``'s HELD of each session, cut at its column (it may hold a space)."""
    lines = (await ms(ms_dirs, "ls")).stdout.decode().splitlines()
    start, end = lines[0].index("HELD"), lines[0].index("COMMAND")
    return {line.split()[0]: line[start:end].strip() for line in lines[1:]}


async def counts(ms_dirs: MsDirs) -> dict[str, tuple[bool, int, int]]:
    """``ls --json``'s held, holders and watchers of each session, the rows
    read by the listing's strict reader too."""
    out = (await ms(ms_dirs, "ls", "--json")).stdout
    assert {r.name: (r.held, r.holders, r.watchers) for r in read_listing(out)} == {
        row["name"]: (row["held"], row["holders"], row["watchers"]) for row in json.loads(out)
    }
    return {r.name: (r.held, r.holders, r.watchers) for r in read_listing(out)}


async def join(
    joiner: Client, child_id: int, *, read_only: bool, reader: Client | None = None
) -> list[int]:
    """``joiner`` joins (or watches) ``child_id``; ``reader``, the client
    that reads its master if one does, gives reading back when asked: the
    fds the join made (to close)."""
    fds: list[int] = []

    async def give_back(reader: Client) -> None:
        async for notice in reader.notices:
            if isinstance(notice, GiveBack) and notice.id == child_id:
                fds.append(await reader.hand_back(child_id, b""))
                return

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            if reader is not None:
                nursery.start_soon(give_back, reader)
            (joined,) = await joiner.claim([child_id], join=not read_only, read_only=read_only)
    assert joined.error is None, joined.error
    return fds + [fd for fd in (joined.master, joined.feed) if fd is not None]


async def test_ls_counts_the_holders_and_the_watchers(
    ms_dirs: MsDirs, daemon: RunningDaemon
) -> None:
    await ms(ms_dirs, "new", "-d", "-n", "s", "--", "cat")
    await ms(ms_dirs, "new", "-d", "-n", "t", "--", "cat")
    assert await held_column(ms_dirs) == {"s": "-", "t": "-"}
    assert await counts(ms_dirs) == {"s": (False, 0, 0), "t": (False, 0, 0)}
    fds: list[int] = []
    try:
        async with (
            open_client(daemon.paths) as a,
            open_client(daemon.paths) as b,
            open_client(daemon.paths) as c,
        ):
            s, t = (x.id for x in sorted(await a.list(), key=lambda x: x.name))
            (first,) = await a.claim([s], join=True)  # a client that shares
            (other,) = await a.claim([t])
            fds += [r.master for r in (first, other) if r.master is not None]
            assert await held_column(ms_dirs) == {"s": "1", "t": "1"}
            assert (await counts(ms_dirs))["s"] == (True, 1, 0)
            fds += await join(b, s, read_only=False, reader=a)
            fds += await join(c, s, read_only=True)  # the daemon reads it already
            assert await held_column(ms_dirs) == {"s": "3 (1 ro)", "t": "1"}
            assert await counts(ms_dirs) == {"s": (True, 3, 1), "t": (True, 1, 0)}
            await b.release([s])
            assert await held_column(ms_dirs) == {"s": "2 (1 ro)", "t": "1"}
            assert (await counts(ms_dirs))["s"] == (True, 2, 1)
            await c.release([s])
            assert (await held_column(ms_dirs))["s"] == "1"
            assert (await counts(ms_dirs))["s"] == (True, 1, 0)
            await a.release([s, t])
        assert await held_column(ms_dirs) == {"s": "-", "t": "-"}
    finally:
        for fd in fds:
            close_fd(fd)


async def test_a_daemon_before_sharing_shows_held_as_one(ms_dirs: MsDirs) -> None:
    async with older_daemon(ms_dirs, 8):
        await ms(ms_dirs, "new", "-d", "-n", "s", "--", "cat")
        async with open_client(ms_dirs.paths) as a:
            assert a.version == 8
            (found,) = await a.list()
            (claimed,) = await a.claim([found.id])
            try:
                (seen,) = await a.list()
                assert (seen.held, seen.holders, seen.watchers) == (True, 0, 0)  # no counts
                assert await held_column(ms_dirs) == {"s": "1"}
                assert await counts(ms_dirs) == {"s": (True, 1, 0)}
            finally:
                close_fd(claimed.master)
