"""Who may reach the daemon, and what a hostile or broken peer can do to it.

- Unsafe runtime/state dirs and planted sockets are refused before anything is
  started or connected to.
- A peer of another uid is refused by the daemon itself (SO_PEERCRED).
- Protocol abuse gets one ``Error`` with ``req=None`` naming the problem, then
  the connection closes; the daemon, its other clients and its children carry
  on, and the daemon's fd count comes back to where it was.
"""

from __future__ import annotations

import array
import errno
import json
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from multiserver import (
    PROTOCOL_VERSION,
    Client,
    UnsafeDirectory,
    connect,
    open_client,
)
from multiserver.client._calls import listing
from multiserver.protocol._codec import HEADER, MAGIC, MAX_FRAME, Codec, Event, close_fds
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    Children,
    Error,
    Hello,
    ListChildren,
    Message,
    Ok,
    Refused,
    Welcome,
)
from multiserver.protocol._proto import MAX_SELECT_IDS, MAX_SELECT_PREFIXES
from tests.conftest import (
    MsDirs,
    RunningDaemon,
    close_fd,
    daemon_pids_for,
    fd_links,
    is_alive,
    read_until,
    wait_fds_back,
)

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


def assert_no_daemon(ms_dirs: MsDirs) -> None:
    assert daemon_pids_for(ms_dirs.paths.socket) == []
    assert not os.path.lexists(ms_dirs.paths.socket) or not ms_dirs.paths.socket.is_socket()
    assert not ms_dirs.paths.lock.exists()


async def start_expecting_refusal(ms_dirs: MsDirs) -> UnsafeDirectory:
    with trio.fail_after(10), pytest.raises(UnsafeDirectory) as exc_info:
        async with open_client(ms_dirs.paths, start=True):
            pass
    return exc_info.value


# --- unsafe directories ---------------------------------------------------------------


@pytest.mark.parametrize("which", ["runtime", "state"])
async def test_symlinked_dir_refused(ms_dirs: MsDirs, which: str) -> None:
    real = ms_dirs.root / "real"
    real.mkdir(mode=0o700)
    link = getattr(ms_dirs, which)
    link.symlink_to(real)
    refused = await start_expecting_refusal(ms_dirs)
    assert str(refused) == f"{link}: refusing a runtime dir that is a symlink"
    assert_no_daemon(ms_dirs)
    assert os.listdir(real) == []


@pytest.mark.parametrize("which", ["runtime", "state"])
@pytest.mark.parametrize("mode", [0o755, 0o750, 0o701])
async def test_group_or_other_accessible_dir_refused(
    ms_dirs: MsDirs, which: str, mode: int
) -> None:
    path = getattr(ms_dirs, which)
    path.mkdir(mode=0o700)
    path.chmod(mode)
    refused = await start_expecting_refusal(ms_dirs)
    assert str(refused) == f"{path}: mode {mode:04o} lets other users in (want 0700)"
    assert_no_daemon(ms_dirs)


@needs_root
@pytest.mark.parametrize("which", ["runtime", "state"])
async def test_dir_owned_by_another_uid_refused(ms_dirs: MsDirs, which: str) -> None:
    path = getattr(ms_dirs, which)
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, NOBODY)
    refused = await start_expecting_refusal(ms_dirs)
    assert str(refused) == f"{path}: owned by uid {NOBODY}, not {os.getuid()}"
    assert_no_daemon(ms_dirs)


# --- planted sockets ----------------------------------------------------------------------


def plant(ms_dirs: MsDirs, kind: str) -> socket.socket | None:
    """Put something that is not our daemon's socket at the socket path; a
    listening socket (returned) shows whether anyone connected to it."""
    ms_dirs.runtime.mkdir(mode=0o700)
    path = ms_dirs.paths.socket
    if kind == "file":
        path.write_bytes(b"")
        return None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.setblocking(False)
    if kind == "symlink":
        elsewhere = ms_dirs.root / "elsewhere.socket"
        listener.bind(str(elsewhere))
        path.symlink_to(elsewhere)
    else:
        listener.bind(str(path))
        os.chown(path, NOBODY, NOBODY)
    listener.listen(8)
    return listener


PLANTS = [
    pytest.param("other-uid", f"socket owned by uid {NOBODY}", marks=needs_root),
    pytest.param("file", "not a socket"),
    pytest.param("symlink", "not a socket"),
]


@pytest.mark.parametrize(("kind", "why"), PLANTS)
async def test_planted_socket_is_never_connected_to(ms_dirs: MsDirs, kind: str, why: str) -> None:
    listener = plant(ms_dirs, kind)
    try:
        with trio.fail_after(10):
            with pytest.raises(UnsafeDirectory) as exc_info:
                await connect(ms_dirs.paths.socket)
            assert str(exc_info.value).startswith(f"{ms_dirs.paths.socket}: {why}")
            # Nor does connect-or-start replace it or start a daemon beside it.
            with pytest.raises(UnsafeDirectory):
                async with open_client(ms_dirs.paths, start=True):
                    pass
        if listener is not None:
            with pytest.raises(BlockingIOError):
                listener.accept()
        assert daemon_pids_for(ms_dirs.paths.socket) == []
        assert os.path.lexists(ms_dirs.paths.socket)  # left alone
    finally:
        if listener is not None:
            listener.close()


# --- a peer of another uid --------------------------------------------------------------------

INTRUDER = """
import json, os, socket, sys
import trio
from multiserver import RequestFailed
from multiserver.internal import handshake
from multiserver.protocol._codec import NEED_DATA, Codec
from multiserver.protocol._messages import PROTOCOL_VERSION, Hello
from multiserver.protocol._wire import FramedSocket

path = sys.argv[1]
os.setgroups([])
os.setgid(65534)
os.setuid(65534)

# By hand: what exactly comes back, and how the connection ends.
codec = Codec("client")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
sock.connect(path)
try:
    sock.sendall(codec.send(Hello(min_version=1, max_version=PROTOCOL_VERSION, client="intruder")))
except (BrokenPipeError, ConnectionResetError):
    pass  # refused before we spoke: the answer is waiting to be read
messages, closed = [], None
while closed is None:
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        closed = "reset"
        break
    if not data:
        closed = "eof"
        break
    codec.receive_data(data)
    while (event := codec.next_event()) is not NEED_DATA:
        msg = event.message
        messages.append([type(msg).__name__, getattr(msg, "req", "-"), getattr(msg, "errno", None),
                         getattr(msg, "message", None)])

# Through the client library's handshake, which must report the refusal
# (not a broken pipe) however the race with the daemon's close goes.
async def library_handshake():
    s = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await s.connect(path)
    framed = FramedSocket(s, Codec("client"))
    try:
        await handshake(framed)
    except RequestFailed as exc:
        return [exc.errno, exc.message]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    finally:
        framed.close()
    return ["welcomed"]

library = [trio.run(library_handshake) for _ in range(10)]
print(json.dumps({"uid": os.getuid(), "messages": messages, "closed": closed, "library": library}))
"""


@needs_root
async def test_peer_of_another_uid_is_refused_by_the_daemon(daemon: RunningDaemon) -> None:
    async with open_client(daemon.paths) as bystander:
        launched = await bystander.launch(["cat"])
        assert launched.master is not None
        # A reply without fds: the daemon has closed its copy of the fd it sent.
        await bystander.list()
        baseline = fd_links(daemon.pid)
        # Only the daemon's own check stands between uid 65534 and the
        # daemon: a hard link outside the private runtime dir, mode 0777.
        link_dir = Path(tempfile.mkdtemp(prefix="ms-peer-", dir="/tmp"))
        link = link_dir / "s"
        try:
            link_dir.chmod(0o755)
            os.link(daemon.paths.socket, link)
            os.chmod(daemon.paths.socket, 0o777)
            with trio.fail_after(20):
                result = await trio.run_process(
                    [sys.executable, "-c", INTRUDER, str(link)], capture_stdout=True
                )
        finally:
            os.chmod(daemon.paths.socket, 0o600)
            link.unlink(missing_ok=True)
            link_dir.rmdir()
        report = json.loads(result.stdout)
        assert report["uid"] == NOBODY
        [[name, req, err, message]] = report["messages"]
        assert (name, req, err) == ("Error", None, errno.EACCES)
        assert message == f"permission denied: uid {NOBODY} is not the daemon's owner"
        assert report["closed"] in ("eof", "reset")
        assert report["library"] == [[errno.EACCES, message]] * 10
        # The daemon, its client and its child carry on; nothing leaked.
        await wait_fds_back(daemon.pid, baseline)
        await assert_bystander_fine(bystander, launched.master, launched.child.pid)
        close_fd(launched.master)
    assert f"refused uid {NOBODY}" in daemon.paths.log.read_text()


async def assert_bystander_fine(client: Client, master: int, child_pid: int) -> None:
    assert is_alive(child_pid)
    [info] = await client.list()
    assert (info.state, info.held) == ("running", True)
    os.write(master, b"still-here\n")
    await read_until(master, b"still-here\r\nstill-here\r\n")


# --- protocol abuse ----------------------------------------------------------------------------


class RawPeer:
    """A client that writes raw bytes and reads frames with the codec."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.codec = Codec("client")

    async def next_message(self) -> Message | None:
        """The next frame, or None once the daemon closed the connection."""
        while True:
            event = self.codec.next_event()
            if isinstance(event, Event):
                close_fds(event.fds)
                return event.message
            try:
                data = await self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.codec.receive_data(data)

    async def all_messages(self) -> list[Message]:
        messages = []
        while (msg := await self.next_message()) is not None:
            messages.append(msg)
        return messages

    async def hello(
        self, min_version: int = MIN_PROTOCOL_VERSION, max_version: int | None = None
    ) -> Message | None:
        top = max(min_version, PROTOCOL_VERSION) if max_version is None else max_version
        frame = self.codec.send(Hello(min_version=min_version, max_version=top))
        await self.sock.send(frame)
        return await self.next_message()


def frame(mtype: int, body: bytes, *, version: int = PROTOCOL_VERSION, nfds: int = 0) -> bytes:
    return HEADER.pack(MAGIC, version, mtype, nfds, len(body), 0) + body


LIST = ListChildren.TYPE
LIST_BODY = b'{"req":1,"foreground":false}'
BAD_VERSION = PROTOCOL_VERSION + 98

# (name, say hello first?, bytes, send a pipe fd with them?, the error's text)
ABUSE = [
    (
        "garbage",
        False,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        False,
        "bad magic: not a multiserver frame",
    ),
    ("garbage-after-hello", True, b"\0" * 64, False, "bad magic: not a multiserver frame"),
    (
        "oversize-hello",
        False,
        HEADER.pack(MAGIC, PROTOCOL_VERSION, Hello.TYPE, 0, MAX_FRAME, 0),
        False,
        f"frame of {MAX_FRAME + HEADER.size} bytes exceeds the maximum of {MAX_FRAME}",
    ),
    (
        "oversize-after-hello",
        True,
        HEADER.pack(MAGIC, PROTOCOL_VERSION, LIST, 0, 1 << 30, 1 << 30),
        False,
        f"frame of {HEADER.size + (2 << 30)} bytes exceeds the maximum of {MAX_FRAME}",
    ),
    (
        "wrong-version-after-hello",
        True,
        frame(LIST, LIST_BODY, version=BAD_VERSION),
        False,
        f"frame has protocol version {BAD_VERSION}, negotiated {PROTOCOL_VERSION}",
    ),
    (
        "fds-announced-none-sent",
        True,
        frame(LIST, LIST_BODY, nfds=1),
        False,
        "ListChildren may not carry 1 fds",
    ),
    (
        "fds-sent-unannounced",
        True,
        frame(LIST, LIST_BODY),
        True,
        "1 fds arrived; no message a client sends carries fds",
    ),
    ("unknown-type", True, frame(999, b"{}"), False, "unknown message type 999"),
    (
        "malformed-body",
        True,
        frame(LIST, b'{"req":"one"}'),
        False,
        "ListChildren: malformed body",
    ),
    ("not-json", True, frame(LIST, b"\xff{"), False, "ListChildren: body is not valid JSON"),
    (
        "request-before-hello",
        False,
        frame(LIST, LIST_BODY),
        False,
        "expected Hello first, got ListChildren",
    ),
    ("daemon-message", True, frame(Ok.TYPE, b'{"req":1}'), False, "Ok may not be sent by a client"),
    (
        "second-hello",
        True,
        frame(Hello.TYPE, b'{"min_version":1,"max_version":1}'),
        False,
        "Hello sent twice",
    ),
]


@pytest.mark.parametrize(
    ("hello", "data", "with_fd", "problem"),
    [pytest.param(*case[1:], id=case[0]) for case in ABUSE],
)
async def test_protocol_abuse_gets_an_error_and_harms_no_one(
    daemon: RunningDaemon, hello: bool, data: bytes, with_fd: bool, problem: str
) -> None:
    async with open_client(daemon.paths) as bystander:
        launched = await bystander.launch(["cat"])
        assert launched.master is not None
        # A reply without fds: the daemon has closed its copy of the fd it sent.
        await bystander.list()
        baseline = fd_links(daemon.pid)
        pipe_r, pipe_w = os.pipe()
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with trio.fail_after(10):
                await sock.connect(str(daemon.paths.socket))
                peer = RawPeer(sock)
                if hello:
                    assert isinstance(await peer.hello(), Welcome)
                if with_fd:
                    fds = array.array("i", [pipe_r]).tobytes()
                    await sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                else:
                    await sock.send(data)
                messages = await peer.all_messages()
        finally:
            sock.close()
            os.close(pipe_r)
            os.close(pipe_w)
        assert len(messages) == 1, messages
        [error] = messages
        assert isinstance(error, Error)
        assert (error.req, error.errno) == (None, errno.EPROTO)
        assert error.message.startswith("protocol error: "), error.message
        assert problem in error.message
        # The daemon closed its side and every fd it was sent.
        await wait_fds_back(daemon.pid, baseline)
        await assert_bystander_fine(bystander, launched.master, launched.child.pid)
        close_fd(launched.master)
    assert is_alive(daemon.pid)


async def test_no_common_version_is_refused_clearly(daemon: RunningDaemon) -> None:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock, trio.fail_after(10):
        await sock.connect(str(daemon.paths.socket))
        peer = RawPeer(sock)
        refused = await peer.hello(min_version=PROTOCOL_VERSION + 1)
        assert isinstance(refused, Refused)
        assert refused.reason.startswith("no common protocol version")
        assert (refused.min_version, refused.max_version) == (
            MIN_PROTOCOL_VERSION,
            PROTOCOL_VERSION,
        )
        assert await peer.all_messages() == []  # then it closes
    async with open_client(daemon.paths) as client:
        assert client.version == PROTOCOL_VERSION


async def test_version_2_clients_are_served_and_version_3_may_skip_the_listing(
    daemon: RunningDaemon,
) -> None:
    assert (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION) == (2, 9)
    async with open_client(daemon.paths) as client:
        launched = await client.launch(["sleep", "100"], hold=False)
        kid = launched.child.id
        assert client.version == PROTOCOL_VERSION
        async with open_client(daemon.paths) as listing:
            assert [c.id for c in listing.welcome.children] == [kid]
        async with open_client(daemon.paths, children=False) as quiet:
            assert quiet.version == PROTOCOL_VERSION and quiet.welcome.children == []
            [claimed] = await quiet.claim([kid])  # the claim still answers for it
            assert claimed.ok and claimed.child is not None and claimed.child.id == kid
            close_fd(claimed.master)
        # A version-2 client: its Hello has no `children`, it gets the list.
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with sock, trio.fail_after(10):
            await sock.connect(str(daemon.paths.socket))
            welcome = await RawPeer(sock).hello(min_version=2, max_version=2)
            assert isinstance(welcome, Welcome)
            assert welcome.version == 2 and [c.id for c in welcome.children] == [kid]
        await client.signal(kid, signal.SIGKILL)


async def test_a_listing_holds_only_the_children_asked_about_at_any_version(
    daemon: RunningDaemon,
) -> None:
    """Version 7 selects by name prefix and id in the daemon; a connection
    of version 6 (an older daemon) is sent the plain request, which the
    daemon answers with every child, and the client selects the same."""
    async with open_client(daemon.paths) as client:
        made = {}
        for name in ("a", "ab", "b", "ca"):
            made[name] = (await client.launch(["sleep", "100"], name=name, hold=False)).child.id

        async def names(**select: object) -> list[str]:
            return sorted(c.name for c in await client.list(**select))  # type: ignore[arg-type]

        assert await names() == ["a", "ab", "b", "ca"]
        assert await names(prefixes=["a"]) == ["a", "ab"]
        assert await names(ids=[made["b"]]) == ["b"]
        assert await names(prefixes=["ab", "c"], ids=[made["a"]]) == ["a", "ab", "ca"]
        assert await names(prefixes=[]) == []
        assert await names(ids=[9999]) == []
        # What the daemon itself answers to a version-7 request that selects.
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with sock, trio.fail_after(10):
            await sock.connect(str(daemon.paths.socket))
            peer = RawPeer(sock)
            welcome = await peer.hello()
            assert isinstance(welcome, Welcome) and welcome.version == PROTOCOL_VERSION
            await sock.send(peer.codec.send(ListChildren(req=1, prefixes=["b"], ids=[made["ca"]])))
            answer = await peer.next_message()
            assert isinstance(answer, Children)
            assert sorted(c.name for c in answer.children) == ["b", "ca"]
        # A version-6 connection: the request goes without the new fields
        # (a version-6 daemon refuses a field it does not know), the answer
        # holds every child, and the call selects.
        call = listing(foreground=False, prefixes=["a"], ids=[made["ca"]], version=6)
        sent = call.message(1)
        assert isinstance(sent, ListChildren) and (sent.prefixes, sent.ids) == (None, None)
        every = await client.list()
        got = call.feed(Event(Children(req=1, children=every, last=True), []))
        assert isinstance(got, list) and sorted(c.name for c in got) == ["a", "ab", "ca"]
        for kid in made.values():
            await client.signal(kid, signal.SIGKILL)


async def test_a_listing_that_selects_by_too_much_is_refused_and_the_client_selects_itself(
    daemon: RunningDaemon,
) -> None:
    """Each child is matched against every prefix: a peer asking with a
    million would stall the daemon's loop for everyone. Past the bounds the
    daemon answers E2BIG in one line and serves on; the reference client
    asks for every child instead and selects the same itself."""
    async with open_client(daemon.paths) as client:
        kid = (await client.launch(["sleep", "100"], name="a", hold=False)).child.id
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with sock, trio.fail_after(10):
            await sock.connect(str(daemon.paths.socket))
            peer = RawPeer(sock)
            await peer.hello()
            many = ListChildren(req=1, prefixes=["x"] * (MAX_SELECT_PREFIXES + 1))
            await sock.send(peer.codec.send(many))
            answer = await peer.next_message()
            assert isinstance(answer, Error) and answer.errno == errno.E2BIG, answer
            assert f"at most {MAX_SELECT_PREFIXES}" in answer.message
            await sock.send(
                peer.codec.send(ListChildren(req=2, ids=list(range(MAX_SELECT_IDS + 1))))
            )
            answer = await peer.next_message()
            assert isinstance(answer, Error) and answer.errno == errno.E2BIG, answer
            await sock.send(peer.codec.send(ListChildren(req=3, prefixes=["a"])))
            answer = await peer.next_message()
            assert isinstance(answer, Children) and [c.id for c in answer.children] == [kid]
        prefixes = ["a", *(f"z{i}" for i in range(MAX_SELECT_PREFIXES))]
        assert [c.id for c in await client.list(prefixes=prefixes)] == [kid]
        assert [c.id for c in await client.list(ids=list(range(MAX_SELECT_IDS + 10)))] == [kid]
        await client.signal(kid, signal.SIGKILL)
