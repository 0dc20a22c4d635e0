"""The sans-IO codec, without an event loop: round trips of every message,
chunking, and every protocol error, each checked with real fds (pipes) so a
leaked or wrongly closed fd shows up."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from multiserver.protocol._codec import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_QUEUED_FDS,
    NEED_DATA,
    Codec,
    Event,
    ProtocolError,
    encode_body,
)
from multiserver.protocol._messages import (
    CLIENT_MESSAGES,
    DAEMON_MESSAGES,
    MESSAGE_TYPES,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ChildError,
    ChildExited,
    ChildInfo,
    Children,
    ChildTaken,
    Claim,
    Claimed,
    ClaimedChild,
    Collect,
    Collected,
    Error,
    EventsMissed,
    GiveBack,
    HandBack,
    HandedBack,
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
    Shared,
    Shutdown,
    Signal,
    Skipped,
    Upgrade,
    Upgraded,
    Watch,
    Watching,
    Welcome,
)

# --- fds and helpers ------------------------------------------------------------


def fd_is_closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return True
    return False


class Pipes:
    """Real fds to hand to a codec: read ends of pipes. The test keeps the
    write ends and each pipe's inode, so a delivered fd can be identified."""

    def __init__(self) -> None:
        self._inodes: dict[int, int] = {}
        self._writers: list[int] = []

    def make(self, n: int = 1) -> list[int]:
        fds = []
        for _ in range(n):
            r, w = os.pipe()
            self._inodes[r] = os.fstat(r).st_ino
            self._writers.append(w)
            fds.append(r)
        return fds

    def is_pipe(self, fd: int, sent: int) -> bool:
        """``fd`` is open and is the pipe that was sent as ``sent``."""
        return os.fstat(fd).st_ino == self._inodes[sent]

    def close(self) -> None:
        for w in self._writers:
            os.close(w)


@pytest.fixture
def pipes() -> Iterator[Pipes]:
    p = Pipes()
    yield p
    p.close()


def drain(codec: Codec) -> list[Event]:
    """Every complete event the codec holds now."""
    events: list[Event] = []
    while True:
        event = codec.next_event()
        if event is NEED_DATA:
            return events
        assert isinstance(event, Event)
        events.append(event)


def feed(codec: Codec, data: bytes, fds: list[int] | None = None) -> list[Event]:
    codec.receive_data(data, fds or [])
    return drain(codec)


def close_events(events: list[Event]) -> None:
    for event in events:
        for fd in event.fds:
            os.close(fd)


def assert_broken(
    codec: Codec, action: Callable[[], Any], match: str, fds: list[int], pipes: Pipes
) -> str:
    """``action`` raises a one-line ProtocolError matching ``match``; every fd
    in ``fds`` is closed; the codec stays broken and closes fds fed later."""
    with pytest.raises(ProtocolError, match=match) as info:
        action()
    message = str(info.value)
    assert message and "\n" not in message
    left_open = [fd for fd in fds if not fd_is_closed(fd)]
    assert not left_open, f"fds left open: {left_open}"
    assert codec.queued_fds == 0
    with pytest.raises(ProtocolError) as again:
        codec.next_event()
    assert str(again.value) == message
    late = pipes.make(1)
    with pytest.raises(ProtocolError):
        codec.receive_data(Codec("client").send(Hello(min_version=1, max_version=1)), late)
    assert fd_is_closed(late[0])
    return message


def raw_frame(
    mtype: int,
    body: bytes | dict[str, Any],
    blob: bytes = b"",
    *,
    version: int = 1,
    nfds: int = 0,
    magic: bytes = MAGIC,
) -> bytes:
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return HEADER.pack(magic, version, mtype, nfds, len(body), len(blob)) + body + blob


def connected(version: int = 1) -> tuple[Codec, Codec]:
    """A client codec and a daemon codec after the handshake."""
    client, daemon = Codec("client"), Codec("daemon")
    assert len(feed(daemon, client.send(Hello(min_version=1, max_version=version)))) == 1
    welcome = Welcome(version=version, instance_id="x", pid=1, server="s", children=[])
    assert len(feed(client, daemon.send(welcome))) == 1
    assert client.version == daemon.version == version
    return client, daemon


# --- samples of every message ------------------------------------------------------

INFO = ChildInfo(
    id=1,
    pid=4242,
    name="main",
    argv=["bash", "-l", "ünïcödé ✓"],
    cwd="/home/someone",
    tty="/dev/pts/3",
    rows=24,
    cols=80,
    state="running",
    exit_code=None,
    held=True,
    buffered_bytes=12,
    dropped_bytes=0,
    started_at=1_700_000_000.25,
    exited_at=None,
    linger=None,
    fg_pid=4250,
    fg_cwd="/tmp",
    fg_argv=["vim", "x"],
)
INFO_EXITED = ChildInfo(
    id=2,
    pid=4243,
    name="2",
    argv=["true"],
    cwd="/",
    tty="/dev/pts/4",
    rows=50,
    cols=132,
    state="exited",
    exit_code=-9,
    held=False,
    buffered_bytes=0,
    dropped_bytes=1 << 40,
    started_at=1.0,
    exited_at=2.0,
    linger=0.5,
)

CLIENT_SAMPLES: list[Message] = [
    Hello(min_version=1, max_version=3, client="tëst-client"),
    Hello(min_version=1, max_version=1),
    Launch(
        req=1,
        argv=["bash", "-c", "echo 'hi'\n"],
        env={"HOME": "/home/ü", "EMPTY": "", "TERM": "xterm"},
        cwd="/tmp",
        rows=50,
        cols=132,
        name="main",
        linger=2.5,
        hold=False,
    ),
    Launch(req=2, argv=["sh"], env={}, cwd="/"),
    Claim(req=3, ids=[1, 2, 3], steal=True),
    Claim(req=4, ids=[]),
    Release(req=5, ids=[7]),
    Signal(req=6, id=1, signum=15),
    Collect(req=7, id=1),
    ListChildren(req=8, foreground=True),
    Peek(req=9, id=1, max_bytes=0),
    Peek(req=10, id=1),
    Resize(req=11, id=1, rows=1, cols=10000),
    Shutdown(req=12, force=True),
    Shutdown(req=-1),
    Upgrade(req=13),
    Watch(req=14),
    Watch(req=15, since=1),
    Claim(req=16, ids=[1], join=True),
    Claim(req=17, ids=[1], read_only=True),
    HandBack(req=18, id=1, shown=b"\x1b[Hshown\r\n"),
]


def claimed(
    req: int, child: ChildInfo, dropped: int = 0, output: bytes = b"", fd: bool | None = None
) -> Claimed:
    """A Claimed answer for one child (its fd comes along if it runs)."""
    with_fd = child.state == "running" if fd is None else fd
    part = ClaimedChild(
        id=child.id, child=child, dropped=dropped, output_len=len(output), fd=with_fd
    )
    return Claimed(req=req, children=[part], outputs=output)


DAEMON_SAMPLES: list[Message] = [
    Welcome(version=1, instance_id="ab" * 16, pid=99, server="d/0.1", children=[INFO, INFO_EXITED]),
    Refused(reason="no common protocol version", min_version=1, max_version=1),
    Launched(req=1, child=INFO),
    claimed(2, INFO, 7, b"\x1b[1mhi\r\n\x00\xff", fd=False),
    claimed(2, INFO_EXITED, 0),
    ChildError(req=2, id=9, errno=errno.ENOENT, message="no child 9"),
    Released(req=3, ids=[1, 2]),
    Ok(req=4),
    Collected(req=5, child=INFO_EXITED),
    Children(req=6, children=[]),
    Children(req=6, children=[INFO, INFO_EXITED]),
    Peeked(req=7, child=INFO, dropped=3, output=b"abc"),
    Error(req=8, errno=errno.EBUSY, message="child 1 is still running"),
    Error(req=None, errno=errno.EPROTO, message="protocol error: bad magic"),
    ChildExited(id=1, exit_code=0),
    ChildTaken(id=1),
    Upgraded(req=13, pid=77, old_server="multiserver/0.1", server="multiserver/0.2", paused=0.1),
    Watching(req=14, next_seq=1),
    SessionEvent(seq=1, kind="created", id=1, name="main", at=1.5, client=3),
    SessionEvent(seq=2, kind="killed", id=1, name="main", at=2.0, exit_code=-9),
    SessionEvent(seq=3, kind="daemon_upgraded", id=0, name="", at=3.0, server="multiserver/0.2"),
    EventsMissed(first_missing=4, next_seq=4100),
    HandedBack(req=18, id=1),
    GiveBack(id=1),
    Shared(id=1, holders=3, watchers=1, rows=24, cols=80, yours=True),
    Skipped(id=1, missed=123456),
]


def test_samples_cover_every_message_type() -> None:
    assert {type(m) for m in CLIENT_SAMPLES} == CLIENT_MESSAGES
    assert {type(m) for m in DAEMON_SAMPLES} == DAEMON_MESSAGES
    assert set(MESSAGE_TYPES.values()) == CLIENT_MESSAGES | DAEMON_MESSAGES
    assert not CLIENT_MESSAGES & DAEMON_MESSAGES


# --- round trips -------------------------------------------------------------------


@pytest.mark.parametrize("msg", CLIENT_SAMPLES, ids=lambda m: type(m).__name__)
def test_client_to_daemon_round_trip(msg: Message) -> None:
    if isinstance(msg, Hello):
        client, daemon = Codec("client"), Codec("daemon")
    else:
        client, daemon = connected()
    frame = client.send(msg)
    [event] = feed(daemon, frame)
    assert event.message == msg
    assert event.fds == ()
    assert daemon.buffered == 0


@pytest.mark.parametrize("msg", DAEMON_SAMPLES, ids=lambda m: type(m).__name__)
def test_daemon_to_client_round_trip(msg: Message, pipes: Pipes) -> None:
    if isinstance(msg, Welcome | Refused):
        client, daemon = Codec("client"), Codec("daemon")
    else:
        client, daemon = connected()
    nfds = (
        sum(c.fd for c in msg.children)
        if isinstance(msg, Claimed)
        else int(isinstance(msg, Launched))
    )
    fds = pipes.make(nfds)
    frame = daemon.send(msg, len(fds))
    [event] = feed(client, frame, fds)
    assert event.message == msg
    assert event.fds == tuple(fds)
    for fd in fds:
        assert pipes.is_pipe(fd, fd)
    client.close()  # the event's fds are the caller's now
    close_events([event])


def test_error_before_the_handshake_is_accepted_and_negotiates_nothing() -> None:
    client, daemon = Codec("client"), Codec("daemon")
    refusal = Error(req=None, errno=errno.EACCES, message="permission denied: uid 1001")
    [event] = feed(client, daemon.send(refusal))
    assert event.message == refusal
    assert client.version is None


def test_header_fields_of_sent_frames() -> None:
    client, daemon = Codec("client"), Codec("daemon")
    frame = client.send(Hello(min_version=1, max_version=5))
    assert HEADER.unpack_from(frame)[:4] == (MAGIC, 5, Hello.TYPE, 0)
    refused = daemon.send(Refused(reason="r", min_version=2, max_version=3))
    assert HEADER.unpack_from(refused)[:3] == (MAGIC, 3, Refused.TYPE)
    welcome = daemon.send(Welcome(version=4, instance_id="i", pid=1, server="s", children=[]))
    assert HEADER.unpack_from(welcome)[:3] == (MAGIC, 4, Welcome.TYPE)
    assert daemon.version == 4
    launched = daemon.send(Launched(req=1, child=INFO), 1)
    _, version, mtype, nfds, body_len, blob_len = HEADER.unpack_from(launched)
    assert (version, mtype, nfds, blob_len) == (4, Launched.TYPE, 1, 0)
    assert body_len == len(launched) - HEADER_SIZE
    assert json.loads(launched[HEADER_SIZE:])["child"]["argv"][2] == "ünïcödé ✓"


def test_hello_frame_bytes_match_the_documented_example() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "protocol.md").read_text()
    example = doc[doc.index("## 8. Example") :]
    block = example[example.index("```") + 3 :]
    block = block[: block.index("```")]
    documented = bytes.fromhex(
        "".join(re.findall(r"^((?:[0-9a-f]{2} )*[0-9a-f]{2})", block, re.MULTILINE))
    )
    hello = Hello(
        min_version=MIN_PROTOCOL_VERSION, max_version=PROTOCOL_VERSION, client="multiserver-client"
    )
    frame = Codec("client").send(hello)
    assert frame == documented
    body = b'{"min_version":%d,"max_version":%d,"client":"multiserver-client"}' % (
        MIN_PROTOCOL_VERSION,
        PROTOCOL_VERSION,
    )
    assert frame[HEADER_SIZE:] == body
    assert HEADER.unpack_from(frame) == (MAGIC, PROTOCOL_VERSION, Hello.TYPE, 0, len(body), 0)
    # The prose around the bytes names the same message and length.
    prose = (
        f"Hello{{min_version: {MIN_PROTOCOL_VERSION}, max_version: {PROTOCOL_VERSION}, "
        f'client: "multiserver-client"}}` is {len(frame)}'
    )
    assert re.search(re.escape(prose) + r"\s+bytes:", example)


def test_send_refuses_what_the_role_may_not_send() -> None:
    client, daemon = connected()
    with pytest.raises(ValueError, match="a client may not send Ok"):
        client.send(Ok(req=1))
    with pytest.raises(ValueError, match="a daemon may not send Launch"):
        daemon.send(Launch(req=1, argv=["sh"], env={}, cwd="/"))
    with pytest.raises(ValueError, match="Ok may not carry 1 fds"):
        daemon.send(Ok(req=1), 1)
    with pytest.raises(ValueError, match="Claimed may not carry 254 fds"):
        daemon.send(claimed(1, INFO, 0), 254)
    with pytest.raises(
        ValueError, match="1 children say their fd comes with the frame, 2 fds came"
    ):
        daemon.send(claimed(1, INFO, 0), 2)
    small = Codec("daemon", max_frame=64)
    with pytest.raises(ValueError, match="exceeds the maximum"):
        small.send(Peeked(req=1, child=INFO, dropped=0))


# --- chunking ------------------------------------------------------------------------


def test_frame_split_at_every_byte_boundary(pipes: Pipes) -> None:
    msg = claimed(2, INFO, 1, b"\x1b[31mred\x1b[0m\r\n")
    frame = connected()[1].send(msg, 1)
    for cut in range(1, len(frame)):
        client, _ = connected()
        [fd] = pipes.make(1)
        # The fd travels with the frame's first byte.
        assert feed(client, frame[:cut], [fd]) == []
        assert client.queued_fds == 1
        [event] = feed(client, frame[cut:])
        assert event.message == msg
        assert event.fds == (fd,)
        assert client.queued_fds == 0 and client.buffered == 0
        os.close(fd)


def test_frames_fed_one_byte_at_a_time(pipes: Pipes) -> None:
    client, daemon = connected()
    msgs: list[Message] = [
        Ok(req=1),
        claimed(2, INFO, 0, b"x"),
        ChildTaken(id=1),
    ]
    fds = pipes.make(1)
    stream = daemon.send(msgs[0]) + daemon.send(msgs[1], 1) + daemon.send(msgs[2])
    claimed_at = len(daemon.send(msgs[0]))
    events: list[Event] = []
    for i in range(len(stream)):
        events += feed(client, stream[i : i + 1], fds if i == claimed_at else [])
    assert [e.message for e in events] == msgs
    assert [e.fds for e in events] == [(), tuple(fds), ()]
    close_events(events)


def test_several_frames_in_one_chunk() -> None:
    client, daemon = connected()
    msgs = DAEMON_SAMPLES[2:]
    stream = b"".join(daemon.send(m) for m in msgs)
    events = feed(client, stream)
    assert [e.message for e in events] == msgs
    assert client.buffered == 0


def test_chunks_cutting_across_frames() -> None:
    client, daemon = connected()
    msgs = DAEMON_SAMPLES[2:]
    stream = b"".join(daemon.send(m) for m in msgs)
    events: list[Event] = []
    for start in range(0, len(stream), 97):
        events += feed(client, stream[start : start + 97])
    assert [e.message for e in events] == msgs


# --- blobs ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 1 << 20])
@pytest.mark.parametrize("cls", [Claimed, Peeked])
def test_blob_round_trip(cls: type[Claimed] | type[Peeked], size: int) -> None:
    client, daemon = connected()
    output = os.urandom(size)
    msg = (
        claimed(1, INFO, 5, output, fd=False)
        if cls is Claimed
        else Peeked(req=1, child=INFO, dropped=5, output=output)
    )
    frame = daemon.send(msg)
    *_, body_len, blob_len = HEADER.unpack_from(frame)
    assert blob_len == size
    assert frame[HEADER_SIZE + body_len :] == output
    assert b'"output"' not in frame[HEADER_SIZE : HEADER_SIZE + body_len]
    [event] = feed(client, frame)
    assert event.message == msg


def test_blob_inside_the_body_is_refused(pipes: Pipes) -> None:
    client, _ = connected()
    body = json.loads(encode_body(claimed(1, INFO, 0))[0])
    body["outputs"] = "hi"
    fds = pipes.make(1)
    frame = raw_frame(Claimed.TYPE, body, nfds=1)
    message = assert_broken(
        client, lambda: feed(client, frame, fds), "'outputs' must travel as the blob", fds, pipes
    )
    assert message.startswith("Claimed:")


def test_blob_on_a_message_without_one_is_refused() -> None:
    client, _ = connected()
    frame = raw_frame(Ok.TYPE, {"req": 1}, b"xyz")
    with pytest.raises(ProtocolError, match="Ok: carries no blob, got 3 bytes"):
        feed(client, frame)


# --- framing errors ------------------------------------------------------------------


@pytest.mark.parametrize("mtype", [0, 4, 99, 65535])
def test_unknown_message_type(mtype: int, pipes: Pipes) -> None:
    client, _ = connected()
    fds = pipes.make(1)
    frame = raw_frame(mtype, {"req": 1}, nfds=1)
    assert_broken(
        client, lambda: feed(client, frame, fds), f"unknown message type {mtype}$", fds, pipes
    )


def test_daemon_refuses_a_daemon_message(pipes: Pipes) -> None:
    daemon = Codec("daemon")
    frame = Codec("daemon").send(
        Welcome(version=1, instance_id="i", pid=1, server="s", children=[])
    )
    fds = pipes.make(0)  # a daemon refuses fds first: see below
    assert_broken(
        daemon, lambda: feed(daemon, frame, fds), "Welcome may not be sent by a client", fds, pipes
    )


def test_client_refuses_a_client_message(pipes: Pipes) -> None:
    client, _ = connected()
    frame = connected()[0].send(Launch(req=1, argv=["sh"], env={}, cwd="/"))
    fds = pipes.make(1)
    assert_broken(
        client, lambda: feed(client, frame, fds), "Launch may not be sent by a daemon", fds, pipes
    )


@pytest.mark.parametrize("garbage", [b"XS" + bytes(14), b"GET / HTTP/1.1\r\n", b"X", b"M\x00"])
def test_bad_magic(garbage: bytes, pipes: Pipes) -> None:
    daemon = Codec("daemon")
    fds = pipes.make(0)  # a daemon refuses fds first: see below
    assert_broken(daemon, lambda: feed(daemon, garbage, fds), "bad magic", fds, pipes)


def test_bad_magic_is_seen_before_a_whole_header_arrives(pipes: Pipes) -> None:
    daemon = Codec("daemon")
    assert feed(daemon, b"M") == []
    fds = pipes.make(0)  # a daemon refuses fds first: see below
    assert_broken(daemon, lambda: feed(daemon, b"Z", fds), "bad magic", fds, pipes)


def test_wrong_version_after_negotiation(pipes: Pipes) -> None:
    client, _ = connected(version=1)
    fds = pipes.make(1)
    frame = raw_frame(Ok.TYPE, {"req": 1}, version=2)
    assert_broken(
        client,
        lambda: feed(client, frame, fds),
        "frame has protocol version 2, negotiated 1",
        fds,
        pipes,
    )


def test_daemon_refuses_wrong_version_after_negotiation() -> None:
    _, daemon = connected(version=1)
    frame = raw_frame(Collect.TYPE, {"req": 1, "id": 1}, version=0)
    with pytest.raises(ProtocolError, match="protocol version 0, negotiated 1"):
        feed(daemon, frame)


def test_handshake_frames_are_read_whatever_their_header_version() -> None:
    daemon = Codec("daemon")
    [event] = feed(daemon, raw_frame(Hello.TYPE, {"min_version": 1, "max_version": 1}, version=7))
    assert event.message == Hello(min_version=1, max_version=1)
    client = Codec("client")
    welcome = {"version": 3, "instance_id": "i", "pid": 1, "server": "s", "children": []}
    [event] = feed(client, raw_frame(Welcome.TYPE, welcome, version=65535))
    assert client.version == 3


def test_hello_sent_twice(pipes: Pipes) -> None:
    _, daemon = connected()
    fds = pipes.make(0)  # a daemon refuses fds first: see below
    frame = Codec("client").send(Hello(min_version=1, max_version=1))
    assert_broken(daemon, lambda: feed(daemon, frame, fds), "^Hello sent twice$", fds, pipes)


@pytest.mark.parametrize(
    "msg",
    [
        Welcome(version=1, instance_id="i", pid=1, server="s", children=[]),
        Refused(reason="r", min_version=1, max_version=1),
    ],
    ids=lambda m: type(m).__name__,
)
def test_handshake_reply_after_the_handshake(msg: Message, pipes: Pipes) -> None:
    client, _ = connected()
    frame = Codec("daemon").send(msg)
    fds = pipes.make(1)
    assert_broken(
        client,
        lambda: feed(client, frame, fds),
        f"^{type(msg).__name__} after the handshake$",
        fds,
        pipes,
    )


def test_daemon_wants_hello_first(pipes: Pipes) -> None:
    daemon = Codec("daemon")
    frame = raw_frame(Launch.TYPE, {"req": 1, "argv": ["sh"], "env": {}, "cwd": "/"})
    fds = pipes.make(0)  # a daemon refuses fds first: see below
    assert_broken(
        daemon, lambda: feed(daemon, frame, fds), "^expected Hello first, got Launch$", fds, pipes
    )


def test_client_wants_a_handshake_reply_first(pipes: Pipes) -> None:
    client = Codec("client")
    frame = raw_frame(Ok.TYPE, {"req": 1})
    fds = pipes.make(1)
    assert_broken(
        client,
        lambda: feed(client, frame, fds),
        "^expected Welcome or Refused or Error first, got Ok$",
        fds,
        pipes,
    )


def test_oversize_frame_is_refused_as_soon_as_its_header_arrives(pipes: Pipes) -> None:
    client = Codec("client", max_frame=64)
    frame = raw_frame(Error.TYPE, {"req": None, "errno": 1, "message": "x" * 100})
    fds = pipes.make(1)
    assert_broken(
        client,
        lambda: feed(client, frame[:HEADER_SIZE], fds),
        f"frame of {len(frame)} bytes exceeds the maximum of 64",
        fds,
        pipes,
    )


def test_frame_of_exactly_max_frame_is_accepted() -> None:
    msg = Error(req=None, errno=1, message="")
    size = len(Codec("daemon").send(msg))
    msg = Error(req=None, errno=1, message="x" * (100 - size))
    client = Codec("client", max_frame=100)
    frame = Codec("daemon").send(msg)
    assert len(frame) == 100
    [event] = feed(client, frame)
    assert event.message == msg


def test_huge_declared_lengths_are_refused_without_waiting() -> None:
    client, _ = connected()
    header = HEADER.pack(MAGIC, 1, Peeked.TYPE, 0, 2**32 - 1, 2**32 - 1)
    with pytest.raises(ProtocolError, match="exceeds the maximum"):
        feed(client, header)


# --- malformed bodies -------------------------------------------------------------


def _claimed_body() -> dict[str, Any]:
    """A Launched body: a message that carries an fd, a nested ChildInfo."""
    body: dict[str, Any] = json.loads(encode_body(Launched(req=1, child=INFO))[0])
    return body


def _mutated(change: Callable[[dict[str, Any]], object]) -> bytes:
    body = _claimed_body()
    change(body)
    return json.dumps(body).encode()


MALFORMED_BODIES: list[tuple[str, bytes, str]] = [
    ("not JSON", b'{"req": 1,', "body is not valid JSON"),
    ("empty", b"", "body is not valid JSON"),
    ("array", b"[1, 2]", "body is not a JSON object"),
    ("string", b'"req"', "body is not a JSON object"),
    ("null", b"null", "body is not a JSON object"),
    ("missing field", _mutated(lambda b: b.pop("child")), "missing field 'child'"),
    ("missing nested", _mutated(lambda b: b["child"].pop("tty")), "missing field 'tty'"),
    ("extra field", _mutated(lambda b: b.update(extra=1)), "extra fields: 'extra'"),
    ("extra nested", _mutated(lambda b: b["child"].update(x=1)), "child: .*extra fields: 'x'"),
    ("str for int", _mutated(lambda b: b.update(req="5")), "expected integer, got str"),
    ("bool for int", _mutated(lambda b: b.update(req=True)), "expected integer, got bool"),
    ("float for int", _mutated(lambda b: b["child"].update(pid=1.5)), "pid: expected integer"),
    ("null for int", _mutated(lambda b: b.update(req=None)), "req: expected integer, got NoneType"),
    ("str for list", _mutated(lambda b: b["child"].update(argv="bash")), "argv: expected list"),
    ("int in list", _mutated(lambda b: b["child"].update(argv=[1])), "expected string, got int"),
    ("bool for float", _mutated(lambda b: b["child"].update(linger=True)), "expected number"),
    ("str for bool", _mutated(lambda b: b["child"].update(held="yes")), "expected boolean"),
    ("int for bool", _mutated(lambda b: b["child"].update(held=1)), "expected boolean"),
    ("bad literal", _mutated(lambda b: b["child"].update(state="zombie")), "zombie"),
    ("list for object", _mutated(lambda b: b.update(child=[])), "child"),
    ("NaN", b'{"req": NaN}', "NaN is not JSON"),
    ("Infinity", b'{"req": -Infinity}', "-Infinity is not JSON"),
    ("bad UTF-8", b'{"req": "\xff"}', "body is not valid JSON.*utf-8"),
    ("UTF-8 BOM", b"\xef\xbb\xbf" + json.dumps(_claimed_body()).encode(), "BOM"),
    ("UTF-16", json.dumps(_claimed_body()).encode("utf-16"), "body is not valid JSON"),
    (
        "lone surrogate",
        _mutated(lambda b: b["child"].update(name="\ud800")),
        "name: string is not valid Unicode",
    ),
]


@pytest.mark.parametrize(
    ("body", "match"),
    [(b, m) for _, b, m in MALFORMED_BODIES],
    ids=[c[0] for c in MALFORMED_BODIES],
)
def test_malformed_body_closes_the_frames_fds(body: bytes, match: str, pipes: Pipes) -> None:
    client, _ = connected()
    fds = pipes.make(1)
    frame = raw_frame(Launched.TYPE, body, nfds=1)
    message = assert_broken(client, lambda: feed(client, frame, fds), match, fds, pipes)
    assert message.startswith("Launched: ")


def test_malformed_body_from_a_client() -> None:
    _, daemon = connected()
    frame = raw_frame(Launch.TYPE, {"req": 1, "argv": ["sh"], "env": {"A": 1}, "cwd": "/"})
    with pytest.raises(ProtocolError, match=r"^Launch: malformed body: .*env: expected string"):
        feed(daemon, frame)


def test_well_formed_variants_are_accepted() -> None:
    client, _ = connected()
    body = _claimed_body()
    body["child"]["started_at"] = 3  # an integer is a number
    body["child"].pop("fg_pid")  # a field with a default may be left out
    [fd] = os.pipe()[:1]
    [event] = feed(client, raw_frame(Launched.TYPE, body, nfds=1), [fd])
    assert isinstance(event.message, Launched)
    assert event.message.child.started_at == 3.0
    assert event.message.child.fg_pid is None
    close_events([event])


# --- fds -----------------------------------------------------------------------------


def test_frame_announcing_fds_that_did_not_arrive(pipes: Pipes) -> None:
    client, daemon = connected()
    frame = daemon.send(Launched(req=1, child=INFO), 1)
    assert_broken(
        client,
        lambda: feed(client, frame[:HEADER_SIZE]),
        "^Launched announces 1 fds, fewer arrived$",
        [],
        pipes,
    )


def test_fds_that_no_frame_announces(pipes: Pipes) -> None:
    client, daemon = connected()
    fds = pipes.make(2)
    frame = daemon.send(Ok(req=1))
    assert_broken(
        client,
        lambda: feed(client, frame, fds),
        "^2 fds arrived that no frame announced$",
        fds,
        pipes,
    )


def test_extra_fd_beside_an_announced_one_closes_both(pipes: Pipes) -> None:
    client, daemon = connected()
    fds = pipes.make(2)
    frame = daemon.send(Launched(req=1, child=INFO), 1)
    assert_broken(
        client,
        lambda: feed(client, frame, fds),
        "^1 fds arrived that no frame announced$",
        fds,
        pipes,
    )


def test_fds_with_a_later_byte_of_the_frame_are_not_its_fds(pipes: Pipes) -> None:
    client, daemon = connected()
    frame = daemon.send(Ok(req=1))
    assert feed(client, frame[:5]) == []
    fds = pipes.make(1)
    assert_broken(
        client,
        lambda: feed(client, frame[5:], fds),
        "fds arrived that no frame announced",
        fds,
        pipes,
    )


def test_fds_go_to_the_frame_that_starts_in_their_chunk(pipes: Pipes) -> None:
    client, daemon = connected()
    ok = daemon.send(Ok(req=1))
    launched = daemon.send(Launched(req=2, child=INFO), 1)
    # The fd arrives with Ok's tail and Launched's first byte: it is Launched's.
    assert feed(client, ok[:5]) == []
    fds = pipes.make(1)
    events = feed(client, ok[5:] + launched[:1], fds)
    assert [e.fds for e in events] == [()]
    [event] = feed(client, launched[1:])
    assert event.fds == tuple(fds)
    close_events([event])


def test_fds_of_one_chunk_are_assigned_in_frame_order(pipes: Pipes) -> None:
    client, daemon = connected()
    msgs: list[tuple[Message, int]] = [
        (Ok(req=1), 0),
        (claimed(2, INFO, 0, b"a"), 1),
        (ChildExited(id=1, exit_code=0), 0),
        (claimed(2, INFO_EXITED, 0), 0),
        (Launched(req=3, child=INFO), 1),
    ]
    stream = b"".join(daemon.send(m, n) for m, n in msgs)
    first, second = pipes.make(2)
    events = feed(client, stream, [first, second])
    assert [e.message for e in events] == [m for m, _ in msgs]
    assert [len(e.fds) for e in events] == [0, 1, 0, 0, 1]
    assert pipes.is_pipe(events[1].fds[0], first)
    assert pipes.is_pipe(events[4].fds[0], second)
    close_events(events)


def test_message_that_may_not_carry_fds(pipes: Pipes) -> None:
    client, _ = connected()
    fds = pipes.make(1)
    frame = raw_frame(Ok.TYPE, {"req": 1}, nfds=1)
    assert_broken(client, lambda: feed(client, frame, fds), "^Ok may not carry 1 fds$", fds, pipes)


def test_client_messages_never_carry_fds(pipes: Pipes) -> None:
    _, daemon = connected()
    frame = raw_frame(Collect.TYPE, {"req": 1, "id": 1}, nfds=1)
    assert_broken(daemon, lambda: feed(daemon, frame), "^Collect may not carry 1 fds$", [], pipes)
    # With the fds: refused as they arrive, before the frame is read, and closed.
    _, other = connected()
    fds = pipes.make(1)
    assert_broken(
        other,
        lambda: feed(other, frame[:3], fds),
        "^1 fds arrived; no message a client sends carries fds$",
        fds,
        pipes,
    )


@pytest.mark.parametrize("nfds", [2, 253, 254, 65535])
def test_too_many_fds_for_the_message(nfds: int, pipes: Pipes) -> None:
    client, _ = connected()
    body, _ = encode_body(Launched(req=1, child=INFO))
    frame = raw_frame(Launched.TYPE, body, nfds=nfds)
    fds = pipes.make(2)
    assert_broken(
        client,
        lambda: feed(client, frame, fds),
        f"^Launched may not carry {nfds} fds$",
        fds,
        pipes,
    )


def test_fds_without_data(pipes: Pipes) -> None:
    client, _ = connected()
    fds = pipes.make(1)
    assert_broken(
        client, lambda: client.receive_data(b"", fds), "fds arrived without data", fds, pipes
    )


def test_too_many_queued_fds(pipes: Pipes) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3 * MAX_QUEUED_FDS:
        pytest.skip(f"RLIMIT_NOFILE {soft} is too low")
    client, daemon = connected()
    [fd] = pipes.make(1)
    fds = [fd] + [os.dup(fd) for _ in range(MAX_QUEUED_FDS)]
    frame = daemon.send(Launched(req=1, child=INFO), 1)
    assert_broken(
        client,
        lambda: client.receive_data(frame[:3], fds),
        f"too many fds queued \\({MAX_QUEUED_FDS + 1}\\)",
        fds,
        pipes,
    )


@pytest.mark.parametrize("with_fds", [False, True])
def test_truncated_ancillary_data(with_fds: bool, pipes: Pipes) -> None:
    client, daemon = connected()
    fds = pipes.make(1) if with_fds else []
    frame = daemon.send(Launched(req=1, child=INFO), 1)
    assert_broken(
        client,
        lambda: client.receive_data(frame, fds, truncated=True),
        r"ancillary data truncated \(MSG_CTRUNC\)",
        fds,
        pipes,
    )


def test_truncated_read_closes_fds_queued_earlier(pipes: Pipes) -> None:
    client, daemon = connected()
    frame = daemon.send(Launched(req=1, child=INFO), 1)
    queued = pipes.make(1)
    assert feed(client, frame[:10], queued) == []
    assert client.queued_fds == 1
    assert_broken(
        client,
        lambda: client.receive_data(frame[10:], truncated=True),
        "truncated",
        queued,
        pipes,
    )


def test_close_releases_queued_fds_but_not_delivered_ones(pipes: Pipes) -> None:
    client, daemon = connected()
    delivered, queued = pipes.make(2)
    [event] = feed(client, daemon.send(Launched(req=1, child=INFO), 1), [delivered])
    frame = daemon.send(claimed(2, INFO, 0), 1)
    assert feed(client, frame[:20], [queued]) == []
    client.close()
    client.close()
    assert fd_is_closed(queued)
    assert event.fds == (delivered,)
    assert pipes.is_pipe(delivered, delivered)
    close_events([event])


# --- claim batches ------------------------------------------------------------------


def _batch(with_fds: int, outputs: list[bytes]) -> Claimed:
    parts = [
        ClaimedChild(id=i + 1, child=INFO, output_len=len(out), fd=i < with_fds)
        for i, out in enumerate(outputs)
    ]
    parts.append(ClaimedChild(id=99, errno=2, message="no child 99"))
    return Claimed(req=3, children=parts, last=False, outputs=b"".join(outputs))


def test_claim_batch_round_trip_with_fds_in_order(pipes: Pipes) -> None:
    client, daemon = connected()
    msg = _batch(2, [b"one", b"", b"three"])
    fds = pipes.make(2)
    [event] = feed(client, daemon.send(msg, 2), fds)
    assert event.message == msg
    assert event.fds == tuple(fds)
    close_events([event])


@pytest.mark.parametrize(
    ("mutate", "nfds", "match"),
    [
        (lambda b: None, 1, "2 children say their fd comes with the frame, 1 fds came"),
        (lambda b: b["children"][0].update(output_len=4), 2, "output lengths do not add up"),
        (lambda b: b["children"][3].update(fd=True), 3, "a failed child carries output or an fd"),
    ],
    ids=["fd count", "output lengths", "failed child with fd"],
)
def test_inconsistent_claim_batch_is_a_protocol_error(
    mutate: Callable[[dict[str, Any]], object], nfds: int, match: str, pipes: Pipes
) -> None:
    client, _ = connected()
    msg = _batch(2, [b"one", b"", b"three"])
    body, blob = encode_body(msg)
    data = json.loads(body)
    mutate(data)
    frame = raw_frame(Claimed.TYPE, data, blob, nfds=nfds)
    fds = pipes.make(nfds)
    assert_broken(client, lambda: feed(client, frame, fds), match, fds, pipes)


def test_the_documented_event_frame_is_what_the_codec_writes() -> None:
    """docs/protocol.md §8 shows a ``SessionEvent`` and its header's bytes."""
    doc = (Path(__file__).parents[3] / "docs" / "protocol.md").read_text()
    example = doc[doc.index("## 8. Example") :]
    [line] = [x for x in example.splitlines() if x.startswith('← [8 52 0] {"seq":7,')]
    body = line.split(" ", 4)[4].encode()
    _, daemon = connected(8)
    event = SessionEvent(seq=7, kind="exited", id=2, name="2", at=1718000000.25, exit_code=0)
    frame = daemon.send(event)
    assert frame[HEADER_SIZE:] == body
    header = " ".join(f"{b:02x}" for b in frame[:HEADER_SIZE])
    assert f"header `{header}`" in " ".join(example.split())
    assert f"{len(frame)} bytes" in " ".join(example.split())
