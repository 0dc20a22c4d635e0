"""What this multiserver is (its version, the protocols it speaks, what its
command line can do beyond them), told to a person (``version``) and to
the other end of an ssh (``version --json``), and whether the other end's
multiserver is one this one works with (``compatible``)."""

from __future__ import annotations

from multiserver import PROTOCOL_VERSION
from multiserver.internal import MIN_PROTOCOL_VERSION
from multiserver_cli._errors import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from restore import Host

# What this multiserver's command line can do beyond the protocol, for the
# other end of an ssh to ask (``version --json``). attach-relay: ``attach
# --relay`` (attach/_relay); a remote without it is attached through ``ssh -tt``.
# host-label: ``attach --host-label HOST`` says its refusals as ``HOST: ...``
# (the person is on another machine, which calls this one HOST).
# share: ``attach -r`` watches and ``-d`` takes over (``--redraw`` is the
# redraw's flag; before it, ``-r`` was).
FEATURES = ("attach-relay", "host-label", "share")


def version_info() -> dict[str, object]:
    from multiserver import __version__

    return {
        "version": __version__,
        "protocol": PROTOCOL_VERSION,
        "min_protocol": MIN_PROTOCOL_VERSION,
        "features": list(FEATURES),
    }


def compatible(answer: object, host: Host) -> str:
    """The remote's version, if its answer to ``version --json`` says it
    speaks a protocol we speak; CliError, saying what to install, if not."""
    if not isinstance(answer, dict) or not all(
        isinstance(answer.get(k), int) for k in ("protocol", "min_protocol")
    ):
        raise CliError(f"{host.name}: `{host.command} version --json` answered {answer!r}")
    theirs = (answer["min_protocol"], answer["protocol"])
    if theirs[1] < MIN_PROTOCOL_VERSION or theirs[0] > PROTOCOL_VERSION:
        raise CliError(
            f"{host.name}: its multiserver {answer.get('version')} speaks protocol"
            f" {theirs[0]}-{theirs[1]}, this one {MIN_PROTOCOL_VERSION}-{PROTOCOL_VERSION}:"
            f" install the same multiserver on {host.dest} as here"
            f" ({version_info()['version']})"
        )
    return str(answer.get("version"))
