"""One table of scenarios, run against the real daemon and the simulated one
of ``multiserver.testing``: their answers must be the same, frame for frame.

Both drive the same request core (``multiserver.daemon._core``) and the same client
connection; this table is what keeps them from drifting apart anyway (a host
that answers otherwise, a connection the simulator wraps differently). Only
what is the OS's to choose is left out of the comparison: pids, ttys, times,
instance ids.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from multiserver.daemon._core import MAX_REQUEST_IDS, shorten_argv
from multiserver.protocol import _codec
from multiserver.protocol._codec import Codec, close_fds
from multiserver.protocol._messages import (
    PROTOCOL_VERSION,
    ChildExited,
    Children,
    ChildTaken,
    Claim,
    Claimed,
    Collect,
    Collected,
    Error,
    Hello,
    Launch,
    Launched,
    ListChildren,
    Message,
    Ok,
    Peek,
    Peeked,
    Refused,
    Release,
    Released,
    Resize,
    SessionEvent,
    Shutdown,
    Signal,
    Watch,
    Watching,
    Welcome,
)
from multiserver.protocol._record import replaced
from multiserver.protocol._wire import FramedSocket
from multiserver.testing import SimDaemon
from tests.conftest import RunningDaemon

MISSING = "no-such-command-xyz"
# Bytes that are not UTF-8, as Python holds them (surrogateescape).
LATIN_DIR = os.fsdecode(b"caf\xe9")
LATIN_MISSING = os.fsdecode(b"no-such-command-\xe9")
VOLATILE = {"pid", "tty", "started_at", "exited_at", "instance_id", "server", "at"}
# The reply that ends each request's answer.
FINAL: dict[type[Message], tuple[type[Message], ...]] = {
    Launch: (Launched,),
    Claim: (Claimed,),
    Release: (Released,),
    ListChildren: (Children,),
    Peek: (Peeked,),
    Signal: (Ok,),
    Resize: (Ok,),
    Shutdown: (Ok,),
    Collect: (Collected,),
    Watch: (Watching,),
}


def normal(value: Any) -> Any:
    """A message as plain data, without what the OS chooses."""
    names = getattr(type(value), "__record_fields__", None)
    if names is not None:
        fields = {n: getattr(value, n) for n in names}
        return (
            type(value).__name__,
            {k: normal(v) for k, v in fields.items() if k not in VOLATILE},
        )
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


def child_infos(value: Any) -> list[dict[str, Any]]:
    """Every ChildInfo in a ``normal`` answer, in order."""
    if isinstance(value, tuple) and value and value[0] == "ChildInfo":
        return [value[1]]
    if isinstance(value, list | tuple):
        return [i for v in value for i in child_infos(v)]
    if isinstance(value, dict):
        return [i for v in value.values() for i in child_infos(v)]
    return []


class Probe:
    """A raw client: sends one message, reads every frame of its answer."""

    def __init__(self, framed: FramedSocket) -> None:
        self._framed = framed
        self.notices: list[Message] = []
        self.events: list[SessionEvent] = []

    @classmethod
    async def open(cls, path: Path) -> Probe:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.connect(str(path))
        return cls(FramedSocket(sock, Codec("client")))

    async def ask(self, msg: Message) -> list[Any]:
        await self._framed.send(msg)
        answer: list[Any] = []
        while True:
            event = await self._framed.receive()
            close_fds(event.fds)
            reply = event.message
            if isinstance(reply, ChildExited | ChildTaken):
                self.notices.append(reply)
                continue
            if isinstance(reply, SessionEvent):
                self.events.append(reply)
                continue
            answer.append((normal(reply), len(event.fds)))
            if self._done(msg, reply):
                return answer

    @staticmethod
    def _done(msg: Message, reply: Message) -> bool:
        if isinstance(msg, Hello):
            return isinstance(reply, Refused | Error) or (
                isinstance(reply, Welcome) and not reply.more
            )
        if isinstance(reply, Error):
            return True
        if isinstance(reply, Claimed | Children):
            return reply.last
        return isinstance(reply, FINAL[type(msg)])

    async def events_before(self, next_seq: int) -> list[Any]:
        """Every event this watcher read, and reads, up to ``next_seq``
        (not included): as plain data, each connection named by the order
        in which it first appears (the daemons number theirs apart)."""
        while not self.events or self.events[-1].seq < next_seq - 1:
            event = await self._framed.receive()
            close_fds(event.fds)
            if isinstance(event.message, SessionEvent):
                self.events.append(event.message)
        clients: dict[int, int] = {0: 0}
        return [
            normal(replaced(e, client=clients.setdefault(e.client, len(clients))))
            for e in self.events
        ]

    def close(self) -> None:
        self._framed.close()


Step = tuple[str, Callable[[int], Message]]  # which probe, the request for req N


def scenario(cwd: str) -> list[Step]:
    env = {"PATH": os.environ.get("PATH", os.defpath)}

    def launch(**kw: Any) -> Callable[[int], Message]:
        args: dict[str, Any] = {"argv": ["cat"], "env": env, "cwd": cwd, **kw}
        return lambda req: Launch(req=req, **args)

    return [
        ("a", lambda req: Hello(min_version=2, max_version=PROTOCOL_VERSION)),
        ("b", lambda req: Hello(min_version=2, max_version=PROTOCOL_VERSION, children=False)),
        ("w", lambda req: Hello(min_version=2, max_version=PROTOCOL_VERSION, children=False)),
        ("w", lambda req: Watch(req=req)),  # every event from here, live
        ("a", launch(name="one", hold=False)),
        ("a", launch(name="two")),
        ("a", launch(name="one")),  # EEXIST
        ("a", launch(argv=[])),
        ("a", launch(rows=0)),
        ("a", launch(name="bad name")),
        ("a", launch(cwd="relative/dir")),
        ("a", launch(cwd="/no/such/dir")),
        ("a", launch(argv=[MISSING])),
        ("a", launch(linger=-1.0)),
        ("a", launch(env={**env, "A=B": "x"})),
        ("a", launch(argv=["sh", "-c", "exec cat", "x" * 100_000], name="long")),
        (  # id 4: an argument, a cwd and a variable's name and value that are not UTF-8
            "a",
            launch(
                argv=["sh", "-c", "exec cat", os.fsdecode(b"x\xe9")],
                env={**env, os.fsdecode(b"V\xe9"): os.fsdecode(b"\xff")},
                cwd=os.path.join(cwd, LATIN_DIR),
                name="latin",
                hold=False,
            ),
        ),
        ("a", launch(argv=[LATIN_MISSING])),  # the message shows it escaped
        ("a", launch(cwd=os.path.join("/no/such", LATIN_DIR))),
        ("b", lambda req: Claim(req=req, ids=[1, 2, 99, 1])),  # ok, busy, unknown, twice
        ("b", lambda req: Claim(req=req, ids=[2], steal=True)),  # a gets ChildTaken
        ("a", lambda req: Release(req=req, ids=[2, 99])),  # not a's any more; unknown
        ("b", lambda req: Release(req=req, ids=[1, 2], replace_output=True, output=b"screen")),
        ("a", lambda req: Peek(req=req, id=1)),
        ("a", lambda req: Peek(req=req, id=1, max_bytes=-1)),
        ("a", lambda req: Peek(req=req, id=99)),
        ("a", lambda req: Resize(req=req, id=1, rows=0, cols=0)),
        ("a", lambda req: Resize(req=req, id=1, rows=30, cols=100)),
        ("a", lambda req: Resize(req=req, id=99, rows=30, cols=100)),
        ("a", lambda req: Signal(req=req, id=1, signum=0)),
        ("a", lambda req: Signal(req=req, id=1, signum=99999)),
        ("a", lambda req: Signal(req=req, id=99, signum=signal.SIGWINCH)),
        ("a", lambda req: Signal(req=req, id=1, signum=signal.SIGWINCH)),
        ("a", lambda req: Collect(req=req, id=1)),  # still running
        ("a", lambda req: ListChildren(req=req)),
        ("a", lambda req: Claim(req=req, ids=[1, *range(1000, 1000 + MAX_REQUEST_IDS)])),
        ("a", lambda req: Claim(req=req, ids=[1], keep_output=True)),
        ("a", lambda req: Release(req=req, ids=[1])),
        ("a", lambda req: Claim(req=req, ids=[1])),  # the kept output again
        ("a", lambda req: Claim(req=req, ids=[1])),  # held already: nothing left to replay
        ("a", lambda req: Shutdown(req=req)),  # children run: refused
        ("c", lambda req: Hello(min_version=2, max_version=3)),  # an older client
        ("c", lambda req: ListChildren(req=req)),
        ("c", lambda req: Claim(req=req, ids=[3])),  # "long": argv shortened, no argv_omitted
        ("c", lambda req: Claim(req=req, ids=[4])),  # "latin": escaped for an older client
        ("d", lambda req: Hello(min_version=2, max_version=4)),
        ("d", lambda req: ListChildren(req=req)),
        ("d", lambda req: Watch(req=req)),  # EPROTO: version 4
        ("r", lambda req: Hello(min_version=2, max_version=PROTOCOL_VERSION, children=False)),
        ("r", lambda req: Watch(req=req, since=1)),  # every event again, replayed
    ]


async def run(path: Path, steps: list[Step]) -> list[Any]:
    probes: dict[str, Probe] = {}
    transcript: list[Any] = []
    try:
        for n, (who, build) in enumerate(steps, 1):
            if who not in probes:
                probes[who] = await Probe.open(path)
            probe = probes[who]
            with trio.fail_after(20):
                answer = await probe.ask(build(n))
            transcript.append((n, who, answer, [normal(x) for x in probe.notices]))
            probe.notices.clear()
        if "r" in probes:  # what the live watcher and the replay read
            next_seq = transcript[-1][2][0][0][1]["next_seq"]
            for who in ("w", "r"):
                transcript.append((who, await probes[who].events_before(next_seq)))
    finally:
        for probe in probes.values():
            probe.close()
    return transcript


async def test_the_real_and_the_simulated_daemon_answer_alike(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    (tmp_path / LATIN_DIR).mkdir()
    steps = scenario(str(tmp_path))
    real = await run(daemon.paths.socket, steps)
    sim = SimDaemon(tmp_path / "sim" / "d.sock", missing_commands=[MISSING, LATIN_MISSING])
    async with sim.serving():
        simulated = await run(sim.socket_path, steps)
    for got, want in zip(simulated, real, strict=True):
        assert got == want, f"step {want[0]} ({want[1]}): the simulator differs"
    # The table covers what it means to: errors of every kind, and answers.
    errnos = {
        reply[1]["errno"]
        for _, _, answer, _ in real[:-2]
        for reply, _ in answer
        if reply[0] == "Error"
    }
    assert {errno.EEXIST, errno.EINVAL, errno.ENOENT, errno.EBUSY} <= errnos
    notices = [n for _, _, _, ns in real[:-2] for n in ns]
    assert ("ChildTaken", {"id": 2}) in notices
    # The events, as they happened and replayed: the same, in order.
    (_, live), (_, replayed) = real[-2:]
    assert live == replayed
    kinds = [(e[1]["kind"], e[1]["name"]) for e in live]
    assert kinds[:4] == [
        ("created", "one"),
        ("created", "two"),
        ("joined", "two"),
        ("created", "long"),
    ]
    assert ("taken_over", "two") in kinds and ("left", "two") in kinds

    # The bytes came back as they went, and escaped where a person reads them.
    def latin(who: str) -> dict[str, Any]:
        """The "latin" child as ``who`` was last shown it."""
        found = [i for _, w, answer, _ in real[:-2] if w == who for i in child_infos(answer)]
        return [i for i in found if i["name"] == "latin"][-1]

    assert latin("a")["argv"][-1] == os.fsdecode(b"x\xe9")
    assert latin("a")["cwd"] == os.path.join(tmp_path, LATIN_DIR)
    for older in ("c", "d"):  # versions 3 and 4
        assert latin(older)["argv"][-1] == "x\\xe9"
        assert latin(older)["cwd"] == os.path.join(tmp_path, "caf\\xe9")
    messages = [r[1]["message"] for _, _, a, _ in real[:-2] for r, _ in a if r[0] == "Error"]
    assert "command not found: no-such-command-\\xe9" in messages
    assert "no such directory: /no/such/caf\\xe9" in messages


@pytest.mark.parametrize("version", [2, 3])
async def test_an_older_client_sees_no_field_it_does_not_know(
    daemon: RunningDaemon, tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: list[bytes] = []
    decode = _codec.decode_body

    def recording(cls: type[Message], body: bytes, blob: bytes) -> Message:
        bodies.append(body)
        return decode(cls, body, blob)

    argv = ["sh", "-c", "exec cat", "y" * 50_000]
    steps: list[Step] = [
        ("a", lambda req: Hello(min_version=2, max_version=PROTOCOL_VERSION)),
        (
            "a",
            lambda req: Launch(
                req=req,
                argv=argv,
                env={"PATH": os.defpath},
                cwd=str(tmp_path),
                hold=False,
            ),
        ),
    ]
    newer = await run(daemon.paths.socket, steps)
    assert newer[1][2][0][0][1]["child"][1]["argv_omitted"] == shorten_argv(argv)[1] > 45_000
    monkeypatch.setattr(_codec.MESSAGES, "decode_body", recording)
    older = await run(
        daemon.paths.socket,
        [
            ("o", lambda req: Hello(min_version=2, max_version=version)),
            ("o", lambda req: ListChildren(req=req)),
        ],
    )
    assert older[0][2][0][0][1]["version"] == version
    [child] = older[1][2][0][0][1]["children"]
    assert child[1]["argv"][-1].endswith("…")  # shortened all the same
    assert len(bodies) == 2
    for body in bodies:  # version 4's fields never reach it
        assert b'"argv_omitted"' not in body and b'"more"' not in body and b'"last"' not in body


@pytest.mark.parametrize("version", [2, 3, 4])
async def test_an_older_client_never_receives_bytes_in_the_new_form(
    daemon: RunningDaemon, tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child launched with bytes that are not UTF-8 (by a version-5
    client): an older client lists and claims it, and every body it
    receives is one its own codec reads: no {"b": ...}, the bytes escaped."""
    bodies: list[bytes] = []
    decode = _codec.decode_body

    def recording(cls: type[Message], body: bytes, blob: bytes) -> Message:
        bodies.append(body)
        return decode(cls, body, blob)

    latin_dir = tmp_path / LATIN_DIR
    latin_dir.mkdir()
    launch = Launch(
        req=1,
        argv=["sh", "-c", "exec cat", os.fsdecode(b"x\xe9")],
        env={"PATH": os.defpath, os.fsdecode(b"V\xe9"): os.fsdecode(b"\xff")},
        cwd=str(latin_dir),
        hold=False,
    )
    newer = await run(
        daemon.paths.socket,
        [
            ("n", lambda req: Hello(min_version=2, max_version=PROTOCOL_VERSION)),
            ("n", lambda req: launch),
            ("n", lambda req: ListChildren(req=req, foreground=True)),
        ],
    )
    [child] = child_infos(newer[1][2])
    assert child["argv"][-1] == os.fsdecode(b"x\xe9") and child["cwd"] == str(latin_dir)
    [listed] = child_infos(newer[2][2])
    assert listed["fg_cwd"] == str(latin_dir)  # read back from /proc byte for byte
    monkeypatch.setattr(_codec.MESSAGES, "decode_body", recording)
    older = await run(
        daemon.paths.socket,
        [
            ("o", lambda req: Hello(min_version=2, max_version=version)),
            ("o", lambda req: ListChildren(req=req, foreground=True)),
            ("o", lambda req: Claim(req=req, ids=[child["id"]])),
            ("o", lambda req: Signal(req=req, id=child["id"], signum=signal.SIGKILL)),
        ],
    )
    assert older[0][2][0][0][1]["version"] == version
    shown = child_infos(older)
    assert len(shown) == 3  # the Welcome, the listing, the claim
    for info in shown:
        assert info["argv"][-1] == "x\\xe9"
        assert info["cwd"] == os.path.join(tmp_path, "caf\\xe9")
    assert shown[1]["fg_cwd"] == os.path.join(tmp_path, "caf\\xe9")
    assert len(bodies) == 4
    for body in bodies:
        body.decode("utf-8")
        assert b'{"b":' not in body
