"""The simulated daemon's misbehaviour: its ``Behavior`` applied around the
request core's answers, on the daemon's own client connection."""

from __future__ import annotations

import random
import struct
from typing import Protocol

import attrs
import trio

from multiserver.daemon._connection import ClientConnection
from multiserver.daemon._core import Answer, Reply
from multiserver.protocol._codec import MAGIC
from multiserver.protocol._messages import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Hello,
    Message,
    Refused,
    Welcome,
)
from multiserver.protocol._record import replaced
from multiserver.testing._behavior import Behavior


class Intercepted(Protocol):
    """What the intercept reads of its daemon (a ``SimDaemon``)."""

    instance_id: str
    received: list[Message]  # every message read, in order

    @property
    def behavior(self) -> Behavior: ...


_VERSION_FIELD = struct.Struct("!H")  # the header's version, right after MAGIC
_GARBAGE_SIZE = 64


class BehaviorIntercept:
    """Applies a ``SimDaemon``'s current ``Behavior`` to each message: the
    rule's ``close``, ``hang`` and ``delay`` before the core answers, then
    ``refuse``, ``wrong_version``, ``garbage`` and ``crash_mid_frame`` to the
    frames of its answer."""

    def __init__(self, daemon: Intercepted) -> None:
        self._daemon = daemon
        self._rng = random.Random(daemon.instance_id)

    async def before(self, conn: ClientConnection, msg: Message) -> bool:
        self._daemon.received.append(msg)
        rule = self._daemon.behavior.rule(type(msg))
        if rule.close:
            return False
        if rule.hang:
            await conn.read_until_closed(self._daemon.received.append)
            return False
        if rule.delay:
            await trio.sleep(rule.delay)
        return True

    def after(self, conn: ClientConnection, msg: Message, answer: Answer) -> Answer:
        rule = self._daemon.behavior.rule(type(msg))
        if isinstance(msg, Hello) and rule.refuse:
            answer.discard()
            refused = Refused(
                reason="refused by the simulated daemon",
                min_version=MIN_PROTOCOL_VERSION,
                max_version=PROTOCOL_VERSION,
            )
            return Answer([Reply(refused, conn.encode(refused))], close=True)
        if rule.wrong_version:
            answer = self._wrong_version(conn, answer)
        if rule.garbage:
            answer.discard()
            first = answer.replies[0].message if answer.replies else msg
            return Answer([Reply(first, self._garbage())], close=answer.close)
        if rule.crash_mid_frame and answer.replies:
            head, rest = answer.replies[0], answer.replies[1:]
            Answer(rest).discard()
            half = Reply(head.message, head.frame[: max(1, len(head.frame) // 2)], head.fds)
            return Answer([half], close=True)
        return answer

    def _wrong_version(self, conn: ClientConnection, answer: Answer) -> Answer:
        """A Welcome that picks a version the client does not speak; any
        other reply with the wrong version in its header."""
        replies: list[Reply] = []
        for reply in answer.replies:
            if isinstance(reply.message, Welcome):
                welcome = replaced(reply.message, version=PROTOCOL_VERSION + 1)
                replies.append(Reply(welcome, conn.encode(welcome, len(reply.fds)), reply.fds))
            else:
                version = (conn.version or PROTOCOL_VERSION) + 1
                replies.append(Reply(reply.message, _with_version(reply.frame, version), reply.fds))
        return attrs.evolve(answer, replies=replies)

    def _garbage(self) -> bytes:
        data = bytearray(self._rng.randbytes(_GARBAGE_SIZE))
        if data[0] == MAGIC[0]:
            data[0] ^= 0xFF
        return bytes(data)


def _with_version(frame: bytes, version: int) -> bytes:
    out = bytearray(frame)
    _VERSION_FIELD.pack_into(out, len(MAGIC), version)
    return bytes(out)
