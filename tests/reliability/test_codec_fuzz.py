"""Codec fuzz: 100,000+ frames through ``Codec`` in-process.

Streams of random valid frames, of both roles, with random mutations (bit
flips, overwritten bytes, insertions, deletions, cut frames, rewritten header
fields, rewritten JSON bodies, deeply nested JSON, random bytes), cut into
random chunks, with real fds (dups of a pool of pipes) riding on the chunks
where the frames announce them, and sometimes where they do not.

For every stream:

- the codec raises nothing but ``ProtocolError`` (a non-empty single line),
  and once broken stays broken: it raises the same error again and closes
  any fd fed to it afterwards;
- every frame before the first corruption decodes to exactly the message
  that was sent, with its fds (checked by pipe inode);
- every fd fed to the codec was either returned with an event (and is still
  open: nothing closed it twice) or is closed; after ``close()`` it queues
  none.

Seeded: a failure names its seed and reproduces with ``run_stream(seed)``.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import random
import time
from typing import Any, Literal

import attrs

from multiserver.protocol._codec import (
    FIELDS,
    HEADER,
    MAX_FRAME,
    NEED_DATA,
    Codec,
    Event,
    ProtocolError,
)
from multiserver.protocol._messages import (
    CLIENT_MESSAGES,
    DAEMON_MESSAGES,
    MAX_FDS,
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    ChildInfo,
    Claimed,
    ClaimedChild,
    Hello,
    Message,
    Refused,
    Welcome,
)
from tests.reliability._report import record

Role = Literal["client", "daemon"]
FRAMES = 100_000
POOL_SIZE = 16

_REQUESTS = sorted(CLIENT_MESSAGES - {Hello}, key=lambda c: c.TYPE)
_REPLIES = sorted(DAEMON_MESSAGES - {Welcome, Refused}, key=lambda c: c.TYPE)
_RECORDS = {"ChildInfo": ChildInfo, "ClaimedChild": ClaimedChild}
_TEXTS = [
    "",
    "main",
    "bash",
    "/home/ü",
    "ünïcödé ✓",
    "a\nb\tc",
    "\x00",
    "\u2028",
    "😀" * 3,
    "x" * 70,
]


# --- random valid messages ------------------------------------------------------------


def random_value(kind: str, rng: random.Random) -> Any:
    """A value of a field of ``kind`` (``_codec.FIELDS``)."""
    if kind.startswith("?"):
        return None if rng.random() < 0.5 else random_value(kind[1:], rng)
    if kind.startswith("["):
        return [random_value(kind[1:-1], rng) for _ in range(rng.randrange(4))]
    if kind.startswith("lit:"):
        return rng.choice(kind[4:].split("|"))
    if kind == "env":
        return {rng.choice(_TEXTS) + str(i): rng.choice(_TEXTS) for i in range(rng.randrange(4))}
    if kind == "int":
        return rng.choice([0, 1, -1, rng.randrange(1 << 16), rng.randrange(-(1 << 63), 1 << 63)])
    if kind == "float":
        return rng.choice([0.0, 1.5, -2.25, rng.random() * 1e9])
    if kind in ("str", "os"):
        return rng.choice(_TEXTS)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "bytes":
        size = rng.choice([0, 1, 5, 100, 4096]) if rng.random() < 0.99 else 70_000
        return rng.randbytes(size)
    return random_message(_RECORDS[kind], rng)


def random_message(cls: type[Any], rng: random.Random) -> Any:
    if cls is Claimed:
        return random_claimed(rng)
    return cls(**{name: random_value(kind, rng) for name, kind, *_ in FIELDS[cls.__name__]})


def random_claimed(rng: random.Random) -> Claimed:
    """A Claimed whose parts agree with its blob (the sender checks that):
    failed children, children with output, with or without their fd."""
    parts, outputs = [], []
    for _ in range(rng.randrange(5)):
        child_id = random_value("int", rng)
        if rng.random() < 0.3:
            parts.append(
                ClaimedChild(id=child_id, errno=rng.randrange(1, 200), message=rng.choice(_TEXTS))
            )
            continue
        output = random_value("bytes", rng)
        outputs.append(output)
        parts.append(
            ClaimedChild(
                id=child_id,
                child=random_message(ChildInfo, rng),
                dropped=random_value("int", rng),
                output_len=len(output),
                fd=rng.random() < 0.7,
            )
        )
    return Claimed(
        req=random_value("int", rng),
        children=parts,
        last=rng.random() < 0.8,
        outputs=b"".join(outputs),
    )


def fds_for(msg: Message, rng: random.Random) -> int:
    """How many fds travel with ``msg``: what its parts say, else at random."""
    if isinstance(msg, Claimed):
        return sum(1 for c in msg.children if c.fd)
    return rng.randint(0, MAX_FDS.get(type(msg), 0))


# --- mutations ------------------------------------------------------------------------


def _json_mutation(frame: bytes, rng: random.Random) -> bytes:
    """Rewrite the JSON body: a wrong type, an extra or missing key, a lone
    surrogate, NaN, or nesting deeper than json.loads can recurse."""
    magic, version, mtype, nfds, body_len, blob_len = HEADER.unpack_from(frame)
    body = frame[HEADER.size : HEADER.size + body_len]
    blob = frame[HEADER.size + body_len :]
    data = json.loads(body)
    kind = rng.randrange(7)
    if kind == 0 and data:
        data[rng.choice(list(data))] = rng.choice(["5", 1.5, True, None, [], {}, -1])
        new = json.dumps(data).encode()
    elif kind == 1:
        data["extra"] = 1
        new = json.dumps(data).encode()
    elif kind == 2 and data:
        del data[rng.choice(list(data))]
        new = json.dumps(data).encode()
    elif kind == 3:
        new = json.dumps(data).encode()[:-1] + b',"x":"\\ud800"}'
    elif kind == 4:
        new = json.dumps(data).encode()[:-1] + b',"x":NaN}'
    elif kind == 5:
        depth = rng.choice([100, 5_000, 200_000])
        new = b"[" * depth + b"]" * depth
    else:
        new = body.replace(b"{", b"[", 1)
    return HEADER.pack(magic, version, mtype, nfds, len(new), blob_len) + new + blob


def mutate(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    kind = rng.randrange(9)
    at = rng.randrange(len(data))
    if kind == 0:
        data[at] ^= 1 << rng.randrange(8)
    elif kind == 1:
        data[at] = rng.randrange(256)
    elif kind == 2:
        data[at:at] = rng.randbytes(rng.randint(1, 8))
    elif kind == 3:
        del data[at : at + rng.randint(1, 8)]
    elif kind == 4:
        del data[at:]  # the rest of the stream now starts mid-frame
    elif kind == 5:  # one header field rewritten
        field = rng.randrange(6)
        values = list(HEADER.unpack_from(frame))
        values[field] = (
            rng.randbytes(2)
            if field == 0
            else rng.choice([0, 1, 2, 255, 65535, rng.randrange(1 << 16)])
        )
        if field >= 4:
            values[field] = rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(1 << 20)])
        data[: HEADER.size] = HEADER.pack(*values)
    elif kind == 6:
        return _json_mutation(frame, rng)
    elif kind == 7:
        return rng.randbytes(rng.randint(1, 64))
    else:
        data[: HEADER.size] = rng.randbytes(HEADER.size)
    return bytes(data)


# --- fds ------------------------------------------------------------------------------


class FdPool:
    """Pipes whose read ends are dup'ed onto chunks; a delivered fd is
    identified by its inode."""

    def __init__(self, n: int) -> None:
        self._pipes = [os.pipe() for _ in range(n)]
        self.inodes = {os.fstat(r).st_ino for r, _ in self._pipes}

    def dups(self, rng: random.Random, n: int) -> list[int]:
        return [os.dup(rng.choice(self._pipes)[0]) for _ in range(n)]

    def inode(self, fd: int) -> int:
        return os.fstat(fd).st_ino

    def close(self) -> None:
        for r, w in self._pipes:
            os.close(r)
            os.close(w)


def is_closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return True
    return False


# --- one stream ----------------------------------------------------------------------


@attrs.define
class Outcome:
    frames: int = 0  # frames whose first byte reached the codec
    mutated: int = 0
    decoded: int = 0
    fds_fed: int = 0
    fds_delivered: int = 0
    error: str | None = None


@attrs.frozen
class Sample:
    message: Message
    nfds: int
    frame: bytes  # as the peer's codec encodes it, after the handshake


def _samples(role: Role, n: int) -> list[Sample]:
    """Random valid frames a ``role`` may receive, encoded once: building and
    encoding a message costs more than decoding it."""
    rng = random.Random(role)
    sender = Codec("client" if role == "daemon" else "daemon")
    sender.set_version(PROTOCOL_VERSION)
    kinds = _REQUESTS if role == "daemon" else _REPLIES
    out = []
    for i in range(n):
        cls = kinds[i % len(kinds)]
        msg = random_message(cls, rng)
        nfds = fds_for(msg, rng)
        out.append(Sample(msg, nfds, sender.send(msg, nfds)))
    return out


_SAMPLES: dict[Role, list[Sample]] = {}


def samples(role: Role) -> list[Sample]:
    if role not in _SAMPLES:
        _SAMPLES[role] = _samples(role, 1500)
    return _SAMPLES[role]


WELCOME = Welcome(version=PROTOCOL_VERSION, instance_id="f" * 32, pid=1, server="s", children=[])


def handshake(role: Role) -> Sample:
    if role == "daemon":
        msg: Message = Hello(min_version=1, max_version=PROTOCOL_VERSION, client="fuzz")
        return Sample(msg, 0, Codec("client").send(msg))
    return Sample(WELCOME, 0, Codec("daemon").send(WELCOME))


class _Feeder:
    """Feeds one codec: frames go into a pending buffer, which is cut into
    random chunks; the fds of a frame ride on the chunk holding its first
    byte. Records what went in and what came out."""

    def __init__(self, seed: int, rng: random.Random, codec: Codec, pool: FdPool) -> None:
        self.seed = seed
        self.rng = rng
        self.codec = codec
        self.pool = pool
        self.pending = bytearray()
        self.emitted = 0  # stream offset of pending[0]
        self.starts: collections.deque[tuple[int, list[int]]] = collections.deque()
        self.fed: list[int] = []
        self.events: list[Event] = []
        self.delivered: dict[int, int] = {}  # fd -> inode
        self.frames = 0  # frames whose first byte was fed
        self.dirty = False  # something not a clean frame went in

    def add(self, frame: bytes, fds: list[int]) -> None:
        self.starts.append((self.emitted + len(self.pending), fds))
        self.pending += frame

    def flush(self, everything: bool) -> None:
        while self.pending and (everything or self.rng.random() < 0.6):
            n = (
                self.rng.randint(1, len(self.pending))
                if self.rng.random() < 0.5
                else len(self.pending)
            )
            self._feed(n)

    def _feed(self, n: int) -> None:
        rng = self.rng
        data = bytes(self.pending[:n])
        fds: list[int] = []
        while self.starts and self.starts[0][0] < self.emitted + n:
            fds += self.starts.popleft()[1]
            self.frames += 1
        del self.pending[:n]
        self.emitted += n
        truncated = False
        if rng.random() < 0.01:
            fds += self.pool.dups(rng, rng.randint(1, 3))  # fds no frame announces
            self.dirty = True
        if rng.random() < 0.003:
            truncated = True  # MSG_CTRUNC
            self.dirty = True
        if rng.random() < 0.003:
            data = b""  # fds without data
            fds += self.pool.dups(rng, 1)
            self.dirty = True
        self.fed += fds
        self.codec.receive_data(data, fds, truncated=truncated)
        assert data, f"seed {self.seed}: fds without data were accepted"
        for _ in range(len(data) + 2):
            event = self.codec.next_event()
            if event is NEED_DATA:
                return
            assert isinstance(event, Event), event
            self.events.append(event)
            if isinstance(event.message, Hello):
                # As the daemon does before it reads on: its Welcome
                # settles the version for every later frame.
                self.codec.set_version(PROTOCOL_VERSION)
            for fd in event.fds:
                assert fd not in self.delivered, f"seed {self.seed}: fd {fd} delivered twice"
                self.delivered[fd] = self.pool.inode(fd)
        raise AssertionError(f"seed {self.seed}: next_event kept returning events")


def run_stream(seed: int, pool: FdPool) -> Outcome:
    rng = random.Random(seed)
    role: Role = "daemon" if rng.random() < 0.5 else "client"
    max_frame = MAX_FRAME if rng.random() < 0.98 else rng.choice([16, 100, 4096])
    feeder = _Feeder(seed, rng, Codec(role, max_frame=max_frame), pool)
    p_mutate = rng.choice([0.0, 0.02, 0.1, 0.5])
    out = Outcome()
    sent: list[Sample] = []  # the clean prefix, in order
    expected_inodes: list[list[int]] = []
    broken: ProtocolError | None = None
    try:
        if rng.random() < 0.05:  # garbage instead of a stream
            feeder.dirty = True
            feeder.add(rng.randbytes(rng.randint(1, 200)), [])
            out.mutated += 1
        for i in range(rng.randint(1, 40) + 1):
            sample = handshake(role) if i == 0 else rng.choice(samples(role))
            if rng.random() < p_mutate:
                feeder.dirty = True
                out.mutated += 1
                feeder.add(mutate(sample.frame, rng), pool.dups(rng, sample.nfds))
            else:
                fds = pool.dups(rng, sample.nfds)
                if not feeder.dirty:
                    sent.append(sample)
                    expected_inodes.append([pool.inode(fd) for fd in fds])
                feeder.add(sample.frame, fds)
            feeder.flush(everything=False)
        feeder.flush(everything=True)
    except ProtocolError as exc:
        broken = exc
    # fds of frames never fed stay ours (the wire layer stops at an error).
    for _, fds in feeder.starts:
        for fd in fds:
            os.close(fd)
    out.frames = feeder.frames
    out.decoded = len(feeder.events)
    out.fds_fed = len(feeder.fed)
    out.fds_delivered = len(feeder.delivered)
    codec = feeder.codec

    if broken is not None:
        message = str(broken)
        assert message and "\n" not in message, (seed, message)
        out.error = message
        assert codec.queued_fds == 0, seed
        late = pool.dups(rng, 1)
        try:
            codec.receive_data(b"MS", late)
        except ProtocolError as again:
            assert str(again) == message, seed
        else:
            raise AssertionError(f"seed {seed}: a broken codec took more data")
        assert is_closed(late[0]), seed
    else:
        codec.close()
        assert codec.queued_fds == 0, seed

    # The clean prefix decoded to exactly what was sent, with its fds.
    for i, event in enumerate(feeder.events[: len(sent)]):
        assert event.message == sent[i].message, (seed, i)
        assert [feeder.delivered[fd] for fd in event.fds] == expected_inodes[i], (seed, i)
    if broken is None and not feeder.dirty:
        assert len(feeder.events) == len(sent), seed
    # Every fd fed was delivered (and is open) or closed by the codec.
    for fd in feeder.fed:
        if fd in feeder.delivered:
            assert pool.inode(fd) == feeder.delivered[fd], (seed, fd)
        else:
            assert is_closed(fd), f"seed {seed}: fd {fd} leaked by the codec"
    for fd in feeder.delivered:
        os.close(fd)  # raises EBADF if the codec had closed it
    return out


def test_codec_fuzz_100000_frames() -> None:
    pool = FdPool(POOL_SIZE)
    own_fds = len(os.listdir("/proc/self/fd"))
    totals: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    seed = 0
    try:
        while totals["frames"] < FRAMES:
            out = run_stream(seed, pool)
            seed += 1
            totals.update(
                frames=out.frames,
                mutated=out.mutated,
                decoded=out.decoded,
                fds_fed=out.fds_fed,
                fds_delivered=out.fds_delivered,
                streams=1,
            )
            if out.error is not None:
                totals["protocol_errors"] += 1
                totals["nested_too_deeply"] += "nested too deeply" in out.error
                errors[_category(out.error)] += 1
    finally:
        pool.close()
    assert len(os.listdir("/proc/self/fd")) == own_fds - 2 * POOL_SIZE
    # The fuzz reached the failure modes, not just the happy path.
    assert totals["protocol_errors"] > 1000 and totals["fds_delivered"] > 1000, totals
    for category in ("bad magic", "not valid JSON", "malformed body", "fds arrived that no frame"):
        assert any(category in c for c in errors), (category, errors)
    assert totals["nested_too_deeply"] > 0, totals
    record(
        "codec_fuzz",
        seconds=round(time.monotonic() - t0, 1),
        **totals,
        top_errors=dict(errors.most_common(12)),
    )


def _category(message: str) -> str:
    """An error message without its numbers and message names, to count kinds."""
    names = {cls.__name__ for cls in MESSAGE_TYPES.values()} | {"ChildInfo"}
    if message.split(":", 1)[0] in names:
        message = message.split(": ", 1)[1]  # "Launch: malformed body: ..."
    words = []
    for word in message.replace("(", " ").replace(",", " ").split():
        if any(ch.isdigit() for ch in word) or word.strip(".:") in names:
            continue
        words.append(word)
    return " ".join(words[:5])
