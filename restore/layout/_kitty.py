"""kitty: reading its OS windows, tabs and splits, opening a plan in it,
through its remote control: its socket (``--to`` an address, or kitty's
own ``$KITTY_LISTEN_ON``), or ``kitty @`` inside kitty without one.

An arrangement's window is a kitty OS window (named with
``--os-window-name``, read back from ``wm_name``), its tabs are kitty tabs
in the ``splits`` layout. kitty 0.26 cannot be told a split's ratio when it
splits (``launch --bias`` came later), so a split is made, then the new
window is resized (``resize-window``, in cells) until its share is the
plan's.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from multiserver import UntrustedPeer
from multiserver.internal import verify_peer
from restore.layout._layout import LayoutError, Op, OpenTab, SplitPane, kitty_pairs
from restore.layout._terminals import COMMAND_TIMEOUT, ReadPane, ReadTab, TerminalError, run_control

# kitty names every OS window "kitty" unless told otherwise.
_DEFAULT_WM_NAME = "kitty"
# Resizes tried to bring a new split to its share (each one measures first).
_RESIZE_TRIES = 3


# What a command names as its version: the kitty this was written against
# (kitty refuses a client newer than itself, never an older one).
_PROTOCOL_VERSION = [0, 26, 0]
# The fields of a command given as its positional arguments by ``kitty @``.
_POSITIONAL = {"launch": "args", "goto-layout": "layout", "set-tab-title": "title"}
_DCS, _ST = b"\x1bP@kitty-cmd", b"\x1b\\"
# The largest answer read (``ls`` of a big session, ``get-text --extent all``).
_MAX_ANSWER = 64 * 1024 * 1024


@attrs.frozen
class Kitty:
    """A kitty instance's remote control. With a socket address
    (``unix:PATH``, ``unix:@NAME``, ``tcp:HOST:PORT``: kitty's
    ``--listen-on``) commands go straight to it (kitty's remote control
    protocol: one JSON command framed as ``ESC P @kitty-cmd ... ESC \\``, one
    answer, per connection), a few milliseconds each; without one, through
    ``kitty @`` (which talks to the terminal it runs in), about a second
    each, kitty's own start-up."""

    address: str | None = None

    @classmethod
    def at(cls, address: str | None) -> Kitty:
        return cls(address or None)

    def call(self, cmd: str, payload: dict[str, Any], *, what: str) -> Any:
        """Run remote command ``cmd`` with ``payload`` (the protocol's field
        names); its answer's ``data``. TerminalError if it fails."""
        if self.address is None:
            return self._call_cli(cmd, payload, what)
        family, where = _socket_address(self.address, what)
        message = {"cmd": cmd, "version": _PROTOCOL_VERSION, "payload": payload}
        data = _DCS + json.dumps(message).encode() + _ST
        # One bound for the whole call: a socket's timeout is per
        # operation, and a peer that drips a byte now and then would
        # otherwise hold every recv just short of it, for ever.
        deadline = time.monotonic() + COMMAND_TIMEOUT

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            return remaining

        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(left())
                sock.connect(where)
                if family == socket.AF_UNIX:
                    # Abstract names (@kitty) and dirs others can write: any
                    # local user may have taken it first. Nothing is sent
                    # to a kitty not the person's own.
                    verify_peer(sock.fileno(), self.address)
                sock.settimeout(left())
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                answer = bytearray()
                while True:
                    sock.settimeout(left())
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        break
                    answer += chunk
                    if len(answer) > _MAX_ANSWER:
                        raise TerminalError(f"{what}: kitty's answer is too large")
        except UntrustedPeer as exc:
            raise TerminalError(f"{what}: {exc}") from exc
        except TimeoutError as exc:
            raise TerminalError(
                f"{what}: kitty did not answer within {COMMAND_TIMEOUT:g} s"
            ) from exc
        except OSError as exc:
            raise TerminalError(
                f"{what}: cannot reach kitty at {self.address}: {exc.strerror or exc}"
                " (is it running with allow_remote_control and --listen-on?)"
            ) from exc
        start, end = answer.find(_DCS), answer.rfind(_ST)
        if start < 0 or end < start:
            raise TerminalError(f"{what}: kitty closed the connection without an answer")
        try:
            reply = json.loads(answer[start + len(_DCS) : end])
        except ValueError as exc:
            raise TerminalError(f"{what}: kitty's answer is not JSON") from exc
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = reply.get("error") if isinstance(reply, dict) else None
            said = " ".join(str(error or "refused").split())[:300]
            raise TerminalError(f"{what}: kitty: {said}")
        return reply.get("data")

    def _call_cli(self, cmd: str, payload: dict[str, Any], what: str) -> Any:
        argv = ["kitty", "@", cmd]
        positional = _POSITIONAL.get(cmd)
        for key, value in payload.items():
            if key == positional:
                continue
            flag = "--" + key.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif isinstance(value, list):
                argv += [a for v in value for a in (flag, str(v))]
            elif value is not None and value is not False:
                argv += [flag, str(value)]
        if positional is not None:
            value = payload.get(positional)
            argv += [str(v) for v in value] if isinstance(value, list) else [str(value)]
        return run_control(argv, what)

    def ls(self) -> list[dict[str, Any]]:
        data = self.call("ls", {}, what="reading kitty's windows")
        if isinstance(data, str):  # the protocol sends it as JSON text
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise TerminalError(f"reading kitty's windows: not JSON: {exc}") from exc
        if not isinstance(data, list):
            raise TerminalError("reading kitty's windows: not a list of OS windows")
        return _dicts(data)

    def read(self) -> list[ReadTab]:
        """Every tab of every OS window, its split tree and its windows."""
        tabs: list[ReadTab] = []
        os_windows = self.ls()
        for os_window, name in zip(os_windows, _window_names(os_windows), strict=True):
            for tab in _dicts(os_window.get("tabs")):
                panes = {
                    w["id"]: _pane(w)
                    for w in _dicts(tab.get("windows"))
                    if isinstance(w.get("id"), int)
                }
                try:
                    layout = kitty_pairs(tab.get("layout_state"), list(panes))
                except LayoutError as exc:
                    raise TerminalError(f"reading kitty's tab {tab.get('title')!r}: {exc}") from exc
                tabs.append(ReadTab(name, str(tab.get("title", "")), layout, panes))
        return tabs

    def open(self, ops: Sequence[Op], env: Mapping[str, str]) -> dict[int, int]:
        """Run ``ops``: a new window is an OS window named as the
        arrangement's window, a tab is a tab in the splits layout, a split
        is a window launched next to its target and resized to its share.
        ``env`` is given to every window. Returns each op's pane as kitty's
        window id. TerminalError on the first command that fails (what was
        opened stays open)."""
        windows: dict[int, int] = {}
        first_of: dict[str, int] = {}  # arrangement window -> a kitty window in it
        envs = [f"{k}={v}" for k, v in sorted(env.items())]
        for op in ops:
            what = f"opening {op.command.session} in kitty"
            launch: dict[str, Any] = {
                "args": list(op.command.argv),
                "cwd": op.command.cwd,
                "env": envs,
            }
            if isinstance(op, OpenTab):
                if op.new_window or op.window not in first_of:
                    launch.update(type="os-window", os_window_name=op.window)
                else:
                    launch.update(type="tab", match=f"window_id:{first_of[op.window]}")
                launch["tab_title"] = op.title
                new = _window_id(self.call("launch", launch, what=what), what)
                first_of.setdefault(op.window, new)
                self.call(
                    "goto-layout", {"match": f"window_id:{new}", "layout": "splits"}, what=what
                )
            else:
                assert isinstance(op, SplitPane)
                target = windows[op.target]
                # A split divides the tab's active window.
                self.call("focus-window", {"match": f"id:{target}"}, what=what)
                launch.update(
                    match=f"window_id:{target}",
                    keep_focus=True,
                    location="vsplit" if op.vertical else "hsplit",
                )
                new = _window_id(self.call("launch", launch, what=what), what)
                self._share(target, new, op, what)
            windows[op.pane] = new
        return windows

    def _share(self, target: int, new: int, op: SplitPane, what: str) -> None:
        """Resize ``new`` until it has ``op.percent`` of the space it shares
        with ``target`` (to a cell)."""
        axis = "horizontal" if op.vertical else "vertical"
        key = "columns" if op.vertical else "lines"
        for _ in range(_RESIZE_TRIES):
            sizes = self._sizes({target, new}, key)
            if len(sizes) != 2:
                return
            want = round((sizes[target] + sizes[new]) * op.percent / 100)
            delta = want - sizes[new]
            if delta == 0:
                return
            resize = {"match": f"id:{new}", "axis": axis, "increment": delta}
            self.call("resize-window", resize, what=what)

    def _sizes(self, ids: set[int], key: str) -> dict[int, int]:
        return {
            w["id"]: _int(w.get(key))
            for os_window in self.ls()
            for tab in _dicts(os_window.get("tabs"))
            for w in _dicts(tab.get("windows"))
            if w.get("id") in ids
        }


def _window_names(os_windows: list[dict[str, Any]]) -> list[str]:
    """Each OS window's name: the one it was opened with (``wm_name``, set
    by ``restore --open kitty``), else ``main`` for the first unnamed one
    when no window is called so, else ``kitty-N``."""
    given = [str(w.get("wm_name") or _DEFAULT_WM_NAME) for w in os_windows]
    taken = set(given)
    names = []
    for n, name in enumerate(given, start=1):
        if name == _DEFAULT_WM_NAME:
            name = "main" if "main" not in taken else f"kitty-{n}"
            taken.add(name)
        names.append(str(name))
    return names


def _dicts(value: object) -> list[dict[str, Any]]:
    """The objects of a list in kitty's answer (anything else: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pane(window: dict[str, Any]) -> ReadPane:
    argvs: list[tuple[str, ...]] = []
    cmdline = window.get("cmdline")
    if isinstance(cmdline, list):
        argvs.append(tuple(str(a) for a in cmdline))
    for proc in window.get("foreground_processes", []) or []:
        if isinstance(proc, dict) and isinstance(proc.get("cmdline"), list):
            argvs.append(tuple(str(a) for a in proc["cmdline"]))
    return ReadPane(
        _int(window["id"]),
        _int(window.get("columns")),
        _int(window.get("lines")),
        str(window.get("cwd", "")),
        tuple(argvs),
    )


def _socket_address(address: str, what: str) -> tuple[socket.AddressFamily, Any]:
    kind, _, rest = address.partition(":")
    if kind == "unix" and rest:
        return socket.AF_UNIX, "\0" + rest[1:] if rest.startswith("@") else rest
    if kind == "tcp" and rest:
        host, _, port = rest.rpartition(":")
        if port.isdigit():
            return socket.AF_INET6 if ":" in host else socket.AF_INET, (host, int(port))
    raise TerminalError(f"{what}: not a kitty address: {address!r} (unix:PATH or tcp:HOST:PORT)")


def _window_id(out: object, what: str) -> int:
    text = str(out).strip()
    if not text.isdigit():
        raise TerminalError(f"{what}: kitty did not say which window it opened ({text[:40]!r})")
    return int(text)
