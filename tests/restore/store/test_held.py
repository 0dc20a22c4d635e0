"""Holds that outlive their daemon (``restore/_held.py``), and the build's
check that spares them (``restore._build.spare_held``).

A record counts while its writer holds its lock and its child lives; a
record nobody holds is removed by the reader. The records live in the
test's private runtime dir (``ms_dirs``)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

from restore._build import _Pending, spare_held
from restore._plan import ClaimAnswer, Options, decide_claimed, decide_gone, decide_held
from restore.store._held import DIR_NAME, Hold, HoldRecord, live_holds
from restore.store._model import RestorationRef, SessionLeaf
from tests.conftest import MsDirs
from tests.restore.test_plan import child

INSTANCE = "ab" * 16


def hold(child_pid: int, child_id: int = 3) -> Hold:
    return Hold("s", "/run/ms/multiserver-daemon-1.socket", INSTANCE, child_id, child_pid, 4242)


def test_a_record_counts_while_held_and_its_child_lives(ms_dirs: MsDirs) -> None:
    with subprocess.Popen(["sleep", "60"]) as sleeper:
        record = HoldRecord.write(hold(sleeper.pid))
        assert record is not None
        try:
            assert live_holds() == {(INSTANCE, 3): hold(sleeper.pid)}
            sleeper.kill()
            sleeper.wait()
            assert live_holds() == {}  # its child is gone
        finally:
            record.remove()
    assert os.listdir(ms_dirs.runtime / DIR_NAME) == []


def test_a_record_whose_client_died_is_removed(ms_dirs: MsDirs) -> None:
    """Its writer exits (as a SIGKILLed attach client would): the lock goes
    with it, and the next reader removes the record."""
    code = (
        "from restore.store._held import Hold, HoldRecord;"
        f"HoldRecord.write(Hold('s', '/x', {INSTANCE!r}, 3, {os.getpid()}, 1))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert os.listdir(ms_dirs.runtime / DIR_NAME) == [f"{INSTANCE}-3"]
    assert live_holds() == {}
    assert os.listdir(ms_dirs.runtime / DIR_NAME) == []


def test_spare_held_keeps_only_gone_sessions_from_a_relaunch() -> None:
    def leaf(name: str, child_id: int) -> SessionLeaf:
        ref = RestorationRef("/run/ms/multiserver-daemon-1.socket", INSTANCE, child_id, 99)
        return SessionLeaf(name, ["sh"], "/", ref=ref)

    gone = decide_gone("its daemon is not running", Options())
    expired = decide_gone("its daemon is not running", Options(relaunch=False))
    attached = decide_claimed(ClaimAnswer(child(5)), Options())
    pending = [
        _Pending(leaf("a", 1), gone, "d"),
        _Pending(leaf("b", 2), expired, "d"),
        _Pending(leaf("c", 5), attached, "d"),
        _Pending(leaf("d", 7), gone, "d"),
    ]
    holds = {(INSTANCE, n): hold(os.getpid(), n) for n in (1, 2, 5)}
    spared = spare_held(pending, holds)
    assert [p.decision for p in spared] == [
        decide_held(4242),
        decide_held(4242),
        attached,  # its daemon answered: no hold can be right about it
        gone,  # no hold
    ]


def test_a_record_that_is_not_a_hold_does_not_count(ms_dirs: MsDirs) -> None:
    """Written by something else, or with a value of the wrong type: no
    hold (restore relaunches as before), and the file is left alone while
    someone holds it."""
    d = ms_dirs.runtime / DIR_NAME
    d.mkdir(mode=0o700, parents=True)
    bad = dict(
        name="s",
        socket="/x",
        instance_id=INSTANCE,
        child_id="3",
        child_pid=os.getpid(),
        client_pid=1,
    )
    for data in (b"", b"[]", b"{", json.dumps(bad).encode()):
        path = d / f"{INSTANCE}-3"
        path.write_bytes(data)
        with open(path, "rb") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            assert live_holds() == {}
            assert path.exists()
    assert Hold.from_bytes(hold(5).to_bytes()) == hold(5)
    extra = {**json.loads(hold(5).to_bytes()), "later": [1]}
    assert Hold.from_bytes(json.dumps(extra).encode()) == hold(5)
