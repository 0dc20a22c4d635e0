"""Injected misbehaviour: a ``Rule`` says how a simulated daemon answers one
type of message, a ``Behavior`` holds a rule per client message type."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from multiserver.protocol._messages import CLIENT_MESSAGES, Hello, Message


def _non_negative(_inst: object, _attr: object, value: float) -> None:
    if value < 0:
        raise ValueError(f"delay must be >= 0, got {value}")


@attrs.frozen
class Rule:
    """How a simulated daemon answers one type of message.

    Applied in this order: ``close`` (close at once, no answer), ``hang``
    (never answer), ``delay``, then the answer, altered by ``refuse`` (Hello
    only), ``wrong_version``, ``garbage`` and last ``crash_mid_frame``.
    """

    delay: float = attrs.field(default=0.0, validator=_non_negative)
    """Seconds to wait after reading the message before serving it. The
    connection serves requests in order, so later requests wait too."""
    hang: bool = False
    """Never answer this message or any later one on the connection; read and
    drop what the client sends, never close (until the client does or the
    daemon stops)."""
    close: bool = False
    """Close the connection on receiving this message, without answering."""
    refuse: bool = False
    """Hello only: answer ``Refused`` (the client raises VersionRefused), close."""
    wrong_version: bool = False
    """Hello: a Welcome picking a version the client does not speak. Other
    messages: reply frames whose header carries the wrong version."""
    garbage: bool = False
    """Send random bytes (never starting with the frame magic) instead of the
    answer; the connection stays open."""
    crash_mid_frame: bool = False
    """Send the first half of the first reply frame (with its fds), then close."""

    def __or__(self, other: Rule) -> Rule:
        """Both rules at once: flags are or'ed, the longer delay wins."""
        return Rule(
            delay=max(self.delay, other.delay),
            hang=self.hang or other.hang,
            close=self.close or other.close,
            refuse=self.refuse or other.refuse,
            wrong_version=self.wrong_version or other.wrong_version,
            garbage=self.garbage or other.garbage,
            crash_mid_frame=self.crash_mid_frame or other.crash_mid_frame,
        )


_NORMAL = Rule()


def _freeze_rules(rules: Mapping[type[Message], Rule]) -> Mapping[type[Message], Rule]:
    for kind, rule in rules.items():
        if kind not in CLIENT_MESSAGES:
            raise ValueError(f"{kind.__name__} is not a message a client sends")
        if rule.refuse and kind is not Hello:
            raise ValueError(f"refuse applies to Hello only, not {kind.__name__}")
    return MappingProxyType(dict(rules))


@attrs.frozen
class Behavior:
    """How a ``SimDaemon`` misbehaves: a ``Rule`` per client message type
    (``Hello``, ``Claim``, ...; absent types are answered normally) and
    ``accept_never`` (listen, but never accept a connection).

    Build with ``Behavior(rules={Claim: Rule(delay=5.0)})`` or
    ``Behavior.on(Claim, delay=5.0)``; combine with ``|``.
    """

    rules: Mapping[type[Message], Rule] = attrs.field(factory=dict, converter=_freeze_rules)
    accept_never: bool = False

    @classmethod
    def on(
        cls,
        message: type[Message],
        *,
        delay: float = 0.0,
        hang: bool = False,
        close: bool = False,
        refuse: bool = False,
        wrong_version: bool = False,
        garbage: bool = False,
        crash_mid_frame: bool = False,
    ) -> Behavior:
        """One rule for one message type."""
        rule = Rule(
            delay=delay,
            hang=hang,
            close=close,
            refuse=refuse,
            wrong_version=wrong_version,
            garbage=garbage,
            crash_mid_frame=crash_mid_frame,
        )
        return cls(rules={message: rule})

    def rule(self, message: type[Message]) -> Rule:
        return self.rules.get(message, _NORMAL)

    def __or__(self, other: Behavior) -> Behavior:
        """Both behaviors; rules for the same message type are combined."""
        rules = dict(self.rules)
        for kind, rule in other.rules.items():
            rules[kind] = rules[kind] | rule if kind in rules else rule
        return Behavior(rules=rules, accept_never=self.accept_never or other.accept_never)
