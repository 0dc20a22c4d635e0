"""``multiserver events``: what a script and a person read, against a real
daemon and a person's terminal; the way it ends (Ctrl-C: 0, quietly; its
daemon gone: one line, 1); a daemon too old for events in one line."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import pytest

from multiserver.daemon import _core
from multiserver.testing import SimDaemon
from multiserver_cli.commands.events import shown, wanted
from tests.cli.conftest import MULTISERVER, Terminal, ms, person_env
from tests.conftest import MsDirs, wait_until

DETACH = b"\x1c"


class Follower:
    """``multiserver ARGS`` running on, its stdout read line by line."""

    def __init__(self, ms_dirs: MsDirs, *args: str) -> None:
        self.proc = subprocess.Popen(
            [MULTISERVER, *args],
            env=person_env(ms_dirs),
            cwd=ms_dirs.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.decode())

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.lines)]

    async def wait(self, check: Callable[[list[dict[str, Any]]], object], what: str) -> None:
        await wait_until(lambda: check(self.events()), 20, what)

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C (SIGINT, to its pid): its status and what it said."""
        self.proc.send_signal(signal.SIGINT)
        return self.ended()

    def ended(self) -> tuple[int, str]:
        status = self.proc.wait(timeout=20)
        self._reader.join(timeout=20)
        assert self.proc.stderr is not None
        return status, self.proc.stderr.read().decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def seen(events: list[dict[str, Any]], name: str) -> list[tuple[str, Any]]:
    return [(e["kind"], e["exit_code"]) for e in events if e.get("name") == name]


async def test_launch_attach_detach_and_kill_read_in_order_as_json(
    ms_dirs: MsDirs, open_terminal: Callable[..., Terminal]
) -> None:
    await ms(ms_dirs, "daemon")
    follower = Follower(ms_dirs, "events", "--json", "--since", "1")  # from its first event
    try:
        await ms(ms_dirs, "new", "-d", "-n", "s", "--", "sh", "-c", "echo shown-s; exec sleep 1000")
        await ms(ms_dirs, "new", "-d", "-n", "five", "--", "sh", "-c", "exit 5")
        term = open_terminal()
        await term.wait_prompt()
        term.line("multiserver attach s")
        await term.wait_screen("\nshown-s")  # replayed: attached, its terminal raw
        await follower.wait(lambda e: ("joined", None) in seen(e, "s"), "s joined")
        term.type(DETACH)
        await term.wait_screen("[detached from s]")
        await ms(ms_dirs, "kill", "s")
        await follower.wait(lambda e: ("exited", -signal.SIGHUP) in seen(e, "s"), "s exited")
        await follower.wait(lambda e: ("exited", 5) in seen(e, "five"), "five exited")
        status, said = follower.interrupt()
    finally:
        follower.kill()
    assert (status, said) == (0, "")  # Ctrl-C: quietly
    events = follower.events()
    assert [k for k in seen(events, "s") if k[0] != "activity"] == [
        ("created", None),
        ("joined", None),
        ("left", None),
        ("killed", -signal.SIGHUP),  # `kill`: the SIGHUP a client sent ended it
        ("exited", -signal.SIGHUP),  # and it exited with that code
    ]
    assert seen(events, "five")[0] == ("created", None) and ("exited", 5) in seen(events, "five")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    first = events[0]
    assert first["schema"] == 1 and len(first["daemon_instance"]) == 32
    assert set(first) == {
        "schema",
        "seq",
        "kind",
        "id",
        "name",
        "at",
        "exit_code",
        "client",
        "server",
        "daemon_instance",
    }
    s_events = [e for e in events if e["name"] == "s" and e["kind"] != "activity"]
    assert len({e["id"] for e in s_events}) == 1
    joined, left = s_events[1], s_events[2]
    assert joined["client"] == left["client"] != 0  # the attach's connection


async def test_names_narrow_it_and_the_daemon_going_away_ends_it_in_one_line(
    ms_dirs: MsDirs,
) -> None:
    await ms(ms_dirs, "daemon")
    follower = Follower(ms_dirs, "events", "--json", "--since", "1", "b")
    try:
        await ms(ms_dirs, "new", "-d", "-n", "a", "--", "sh", "-c", "exit 1")
        await ms(ms_dirs, "new", "-d", "-n", "b", "--", "sh", "-c", "exit 2")
        await follower.wait(lambda e: ("exited", 2) in seen(e, "b"), "b exited")
        await ms(ms_dirs, "stop", "--force")
        status, said = follower.ended()
    finally:
        follower.kill()
    assert {e["name"] for e in follower.events()} == {"b"}
    assert status == 1
    assert said == "multiserver: daemon 1 went away: connection closed by peer\n"


async def test_no_daemon_and_a_daemon_too_old_for_events_are_one_line(
    ms_dirs: MsDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    none = await ms(ms_dirs, "events", check=False)
    assert none.returncode == 1 and none.stdout == b""
    assert none.stderr.decode() == (
        f"multiserver: daemon 1 is not running ({ms_dirs.paths.socket}): no events to"
        " follow; `multiserver new` starts it\n"
    )
    monkeypatch.setattr(_core, "PROTOCOL_VERSION", 7)  # a daemon before events
    async with SimDaemon(ms_dirs.paths.socket).serving():
        old = await ms(ms_dirs, "events", check=False)
    assert old.returncode == 1 and old.stdout == b""
    assert old.stderr.decode() == (
        "multiserver: daemon 1: the daemon speaks protocol 7, too old for events"
        " (protocol 8); `multiserver upgrade` gives it the installed code, keeping its"
        " sessions\n"
    )


def test_a_line_for_a_person_says_time_kind_name_id_and_code() -> None:
    base = {"seq": 4, "id": 3, "name": "build", "at": 0.25, "exit_code": None, "server": ""}
    exited = shown({**base, "kind": "exited", "exit_code": 2, "client": 0}, False)
    assert exited.endswith("  exited           build  3  exited with code 2")
    assert exited[:12].count(":") == 2 and exited[8:12] == ".250"
    killed = shown({**base, "kind": "killed", "exit_code": -9, "client": 0}, False)
    assert killed.endswith("killed           build  3  killed by SIGKILL")
    joined = shown({**base, "kind": "joined", "client": 7, "host": "db1"}, False)
    assert joined.endswith("joined           db1:build  3  client 7")
    upgraded = {**base, "kind": "daemon_upgraded", "id": 0, "name": "", "server": "m/2"}
    assert shown({**upgraded, "client": 0}, False).endswith("daemon_upgraded  -  0  now runs m/2")
    missed = shown({"kind": "missed", "first_missing": 5, "next_seq": 9}, False)
    assert missed.endswith("missed           -  -  events 5..8 (list again: multiserver ls)")
    hostile = shown({**base, "kind": "created", "name": "a\x1b]0;x\x07", "client": 1}, False)
    assert "\x1b" not in hostile and "\\x1b" in hostile
    assert json.loads(shown({**base, "kind": "created", "client": 1}, True))["schema"] == 1
    assert wanted({"kind": "missed"}, frozenset({"x"}))
    assert wanted({"kind": "daemon_upgraded", "name": ""}, frozenset({"x"}))
    assert not wanted({"kind": "created", "name": "y"}, frozenset({"x"}))


async def test_since_shows_what_happened_before_with_nothing_happening_after(
    ms_dirs: MsDirs,
) -> None:
    """The events replayed from ``--since`` come at once after the answer
    to Watch, often in the same read: they are shown without waiting for
    another event to wake the command (none comes here)."""
    for i in range(3):
        await ms(ms_dirs, "new", "-d", "-n", f"quiet{i}", "--", "sleep", "1000")
    for attempt in range(5):  # the one read or two: a race each time
        follower = Follower(ms_dirs, "events", "--json", "--since", "1")
        try:
            await follower.wait(lambda e: len(e) >= 3, f"the 3 events before, try {attempt}")
            assert [e["name"] for e in follower.events()][:3] == ["quiet0", "quiet1", "quiet2"]
        finally:
            follower.kill()
