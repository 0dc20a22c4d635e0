"""A client process to SIGKILL at an exact point of its traffic.

Run as ``python -m tests.reliability._crash_client`` from the repository root,
it is a *zygote*: it imports the codec once, then for each JSON line on stdin
forks one client process, reports on stdout, and reaps it. Forking keeps a
kill point at a few milliseconds instead of an interpreter start (~0.6 s).

Each forked client connects to the daemon and runs ``scenario_steps``: hello,
launch (held), claim, release, collect, waiting for every reply like a real
client. It writes its traffic in random chunks of 1..32 bytes and stops

- ``stop_at=K``: right after the K-th byte of its outgoing traffic is written
  (K=0: right after connecting; a K inside a frame leaves the daemon half a
  frame), or
- ``stop_after_reply=i``: right after it read every reply of step ``i`` (it
  then holds the fds those replies carried),

then writes one JSON line ``{"pid", "sent", "step", "launched"}`` and blocks
on a pipe that only the zygote could write to. The test SIGKILLs it there;
the zygote reaps it and writes ``{"reaped": pid, "status": N}``.

If the zygote goes away, a blocked client reads EOF and exits by itself.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback

import attrs

from multiserver.protocol._codec import Codec
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Claim,
    Claimed,
    Collect,
    Hello,
    Launch,
    Launched,
    Message,
    Release,
    Released,
)
from tests.reliability._raw import RawConnection

LAUNCH_ENV = {"PATH": "/usr/bin:/bin", "TERM": "dumb"}


@attrs.frozen
class Step:
    name: str
    message: Message


def scenario_steps(c1: int, c2: int, exited: int) -> list[Step]:
    """What the client does, given two running unheld children and one
    exited one. Its bytes depend only on these ids."""
    return [
        Step(
            "hello",
            Hello(min_version=MIN_PROTOCOL_VERSION, max_version=PROTOCOL_VERSION, client="crash"),
        ),
        Step("launch", Launch(req=1, argv=["cat"], env=LAUNCH_ENV, cwd="/", hold=True)),
        Step("claim", Claim(req=2, ids=[c1, c2])),
        Step("release", Release(req=3, ids=[c1])),
        Step("collect", Collect(req=4, id=exited)),
    ]


def scenario_frames(c1: int, c2: int, exited: int) -> list[bytes]:
    """The exact bytes of each step, as the client's codec encodes them."""
    codec = Codec("client")
    frames = []
    for step in scenario_steps(c1, c2, exited):
        frames.append(codec.send(step.message))
        if isinstance(step.message, Hello):
            codec.set_version(PROTOCOL_VERSION)
    return frames


def _stop(block_fd: int, report: dict[str, object]) -> None:
    report["pid"] = os.getpid()
    os.write(1, (json.dumps(report) + "\n").encode())
    os.read(block_fd, 1)  # until SIGKILL (or the zygote's end)
    os._exit(0)


def _client(spec: dict[str, object], block_fd: int) -> None:
    c1, c2, exited = spec["ids"]  # type: ignore[misc]
    stop_at = spec.get("stop_at")
    stop_after_reply = spec.get("stop_after_reply")
    rng = random.Random(spec.get("seed", 0))  # type: ignore[arg-type]
    report: dict[str, object] = {"sent": 0, "step": "connect", "launched": None}
    conn = RawConnection.connect(str(spec["socket"]))
    held: list[int] = []  # fds the replies carried; ours until we die
    sent = 0
    if stop_at == 0:
        _stop(block_fd, report)
    for i, step in enumerate(scenario_steps(c1, c2, exited)):
        report["step"] = step.name
        frame = conn.codec.send(step.message)
        pos = 0
        while pos < len(frame):
            n = min(rng.randint(1, 32), len(frame) - pos)
            if stop_at is not None:
                n = min(n, stop_at - sent)  # type: ignore[operator]
            conn.sock.sendall(frame[pos : pos + n])
            pos += n
            sent += n
            report["sent"] = sent
            if sent == stop_at:
                _stop(block_fd, report)
        if isinstance(step.message, Hello):
            welcome = conn.next_event()
            assert welcome is not None, "closed instead of a Welcome"
        else:
            req = step.message.req  # type: ignore[attr-defined]
            last = {"claim": Claimed, "release": Released}.get(step.name)
            for event in conn.replies(req, None if last else 1, last=last):
                held.extend(event.fds)
                if isinstance(event.message, Launched):
                    report["launched"] = event.message.child.id
        if stop_after_reply == i:
            report["replied"] = step.name
            _stop(block_fd, report)
    report["step"] = "done"
    _stop(block_fd, report)


def main() -> None:
    block_r, block_w = os.pipe()
    for line in sys.stdin:
        spec = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(block_w)
                _client(spec, block_r)
            except BaseException:
                report = {"pid": os.getpid(), "error": traceback.format_exc()}
                os.write(1, (json.dumps(report) + "\n").encode())
                os.read(block_r, 1)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"reaped": pid, "status": os.waitstatus_to_exitcode(status)}), flush=True)
    os.close(block_w)


if __name__ == "__main__":
    main()
