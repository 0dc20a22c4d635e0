"""What is typed, on its way to the program (pure: bytes in, bytes out, on
the caller's clock): the detach key looked for first (``_keys``), then the
terminal's answers to a replay dropped (``_terminal.AnswerFilter``). Both
may hold a tail for a while; ``deadline`` says until when, and the copy
loop calls ``expire`` once it has passed."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from multiserver_cli.attach._keys import DetachMatcher
    from multiserver_cli.attach._terminal import AnswerFilter


class TypedInput:
    def __init__(self, keys: DetachMatcher | None, answers: AnswerFilter | None) -> None:
        self._keys = keys
        self._answers = answers

    @property
    def detached(self) -> bool:
        """The detach key came: nothing after it was given back."""
        return self._keys is not None and self._keys.detached

    def deadline(self) -> float | None:
        """The first time something held is to go on, if anything is."""
        ends = [self._keys.held_until] if self._keys is not None else []
        if self._answers is not None and self._answers.phase == "window":
            ends.append(self._answers.deadline)
        due = [end for end in ends if end is not None]
        return min(due) if due else None

    def feed(self, data: bytes, now: float) -> bytes:
        """What of ``data`` (read at ``now``) goes on to the program; after
        the detach key, what the answer filter held too."""
        if self._keys is not None:
            data = self._keys.feed(data, now)
        data = self._answer_filtered(data)
        if self.detached and self._answers is not None:
            data += self._answers.close()
        return data

    def expire(self, now: float) -> bytes:
        """What was held and is due at ``now``."""
        out = b""
        answers = self._answers
        if answers is not None and answers.phase == "window" and answers.deadline <= now:
            out += answers.expire()
        if self._keys is not None:
            out += self._answer_filtered(self._keys.expire(now))
        return out

    def close(self) -> bytes:
        """Nothing more will be read: everything held goes on."""
        out = self._answer_filtered(self._keys.flush()) if self._keys is not None else b""
        return out + (self._answers.close() if self._answers is not None else b"")

    def _answer_filtered(self, data: bytes) -> bytes:
        return self._answers.feed(data) if self._answers is not None and data else data
