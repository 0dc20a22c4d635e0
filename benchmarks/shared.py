"""Figure: throughput to 1, 2 and 5 terminals attached to one session, and
the CPU seconds it costs (issue 38).

The ``attached`` figure's machinery with the number of clients as a
parameter (``attached.keeper_sample``): the same program (it waits on a
FIFO, then cats 32 MiB of base64 text and an end marker line), the same
outer 24x80 PTYs and fast readers. The clients attach one after another,
each on its own outer PTY, each until its probe byte comes back (the
program's PTY echoes it, to every client attached so far); then every
terminal's first screen is drained, each client gets a reader thread of
its own (started before the trigger), and the time runs from the trigger
until EVERY reader has seen the end marker. MiB/s counts the 32 MiB.

- multiserver: ``multiserver new -d``, then N x ``multiserver attach
  --redraw none NAME``. One client is the path of the ``attached`` figure:
  it holds the session alone and reads the PTY master itself. From the
  second on, they join (docs/sharing.md): the first gives reading back,
  the daemon reads the master and writes every read into each client's
  feed (a pipe of 1 MiB); a client that falls 1 MiB behind is skipped
  forward and told (``Skipped``), a redraw in its feed in place of what it
  missed.
- tmux: N x ``tmux attach-session`` of one session (the server draws each
  client's screen).
- dtach: N x ``dtach -a SOCKET -r none`` of one socket (its master process
  writes each read to every client its ``select`` finds writable).
- abduco: N x ``abduco -a NAME``, where installed.

The raw PTY of the ``attached`` figure (the program on the outer PTY) is
the baseline, measured in the same runs; the ratio is per run.

Checks, per terminal: where the client passes bytes through unchanged
(multiserver, dtach, abduco), every terminal's byte count must be the
payload's (one CR per line added); tmux draws its own screen, so only
the marker counts. A terminal whose output stops for 2 s before the
marker came is given up on (its client dropped the marker): that run
has no rate for the subject, and the row says how often. After a
multiserver run with several clients, each is detached with its detach
key (untimed), and says how many bytes it was told it skipped: the rows
give them, beside the byte count.

CPU seconds, from the trigger until the program's ``exec sleep``: every
process of the subject (the program and its ``cat``, every client, the
daemon or server; utime + stime from /proc, 10 ms ticks) plus every
reader thread. The detail column splits it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from benchmarks.attached import PAYLOAD, Sample, keeper_sample, make_payload, raw_sample
from benchmarks.common import MIB, scratch
from benchmarks.peers import PEERS
from benchmarks.results import Row, Settings, median, spread
from benchmarks.terminal import Keeper, keepers

NAME = "shared"
CLIENTS = (1, 2, 5)
PEER_NAMES = ("tmux", "dtach", "abduco")
BASELINE = "raw PTY: the program on the outer PTY"
# Beyond this (from the first run), a loaded machine gets fewer runs (3 at least).
SECONDS = 45.0
RATE_FIG = (
    f"shared session: throughput to 1, 2 and 5 attached terminals, {PAYLOAD // MIB} MiB "
    "(MiB/s until every terminal has it; higher is better)"
)
CPU_FIG = (
    f"shared session: CPU seconds for those {PAYLOAD // MIB} MiB, "
    "all clients, server and program, and every reader"
)
WHY_ABSENT = {
    "abduco": "not installed: `make bench-deps` installs the peers from Debian's archive,"
    " which has no abduco (its column is left out)"
}


@attrs.frozen
class Subject:
    keeper: Keeper
    clients: int

    @property
    def label(self) -> str:
        many = "1 client" if self.clients == 1 else f"{self.clients} clients"
        if self.keeper.name != "multiserver":
            return f"{self.keeper.name}, {many}"
        how = "reads the master itself" if self.clients == 1 else "the daemon feeds each"
        return f"multiserver, {many} ({how})"


def _subjects() -> tuple[list[Subject], list[Keeper]]:
    """What is measured, and the peers that are not installed."""
    chosen = [k for k in keepers(PEERS) if k.name == "multiserver" or k.name in PEER_NAMES]
    measured = [Subject(k, n) for k in chosen if k.installed() for n in CLIENTS]
    return measured, [k for k in chosen if not k.installed()]


def run(settings: Settings) -> list[Row]:
    subjects, absent = _subjects()
    raw: list[Sample] = []
    got: dict[Subject, list[Sample]] = {s: [] for s in subjects}
    with scratch("shr") as sc:
        files = make_payload(sc.root / "payload.b64")
        raw_sample(files)  # warm the page cache and the code paths
        for _ in settings.runs_within(SECONDS):
            raw.append(raw_sample(files))
            for subject in subjects:
                got[subject].append(keeper_sample(subject.keeper, files, subject.clients))
    rows = [_rows(s, got[s], raw, got) for s in subjects]
    missing = [_absent(k, raw) for k in absent]
    return [
        *(rate for rate, _ in rows),
        *(rate for rate, _ in missing),
        *(cpu for _, cpu in rows),
        *(cpu for _, cpu in missing),
    ]


def _absent(keeper: Keeper, raw: list[Sample]) -> tuple[Row, Row]:
    why = WHY_ABSENT.get(keeper.name, "not installed")
    base_rate, base_cpu = median([s.mibs for s in raw]), median([s.cpu for s in raw])
    return (
        Row(RATE_FIG, keeper.name, None, "MiB/s", 0, BASELINE, base_rate, detail=why),
        Row(CPU_FIG, keeper.name, None, "s", 0, BASELINE, base_cpu, detail=why),
    )


def _rows(
    subject: Subject,
    samples: list[Sample],
    raw: list[Sample],
    got: dict[Subject, list[Sample]],
) -> tuple[Row, Row]:
    """The subject's throughput row and its CPU row, against the raw PTY
    of the same runs (the runs the marker reached every terminal, for the
    rate)."""
    timed = [(s.rate, r.mibs) for s, r in zip(samples, raw, strict=True) if s.rate is not None]
    rates, paired = [a for a, _ in timed], [b for _, b in timed]
    base_rate = median([r.mibs for r in raw])
    one = got.get(attrs.evolve(subject, clients=1), [])
    rate = Row(
        figure=RATE_FIG,
        subject=subject.label,
        value=median(rates) if rates else None,
        unit="MiB/s",
        runs=len(rates),
        baseline=BASELINE,
        baseline_value=base_rate,
        detail="; ".join(
            part
            for part in (
                f"range {spread(rates)} MiB/s" if rates else "",
                _against_one(subject, samples, one),
                _checked(subject, samples),
                f"`{subject.keeper.shape}` x {subject.clients}",
            )
            if part
        ),
        samples=tuple(rates),
        baseline_samples=tuple(paired),
    )
    cpus = [s.cpu for s in samples]
    cpu = Row(
        figure=CPU_FIG,
        subject=subject.label,
        value=median(cpus),
        unit="s",
        runs=len(cpus),
        baseline=BASELINE,
        baseline_value=median([r.cpu for r in raw]),
        detail=(
            f"range {spread(cpus, 1, '{:.2f}')} s; clients "
            f"{median([s.client_cpu for s in samples]):.2f} s, daemon or server "
            f"{median([s.server_cpu for s in samples]):.2f} s, program "
            f"{median([s.program_cpu for s in samples]):.2f} s, readers "
            f"{median([s.reader_cpu for s in samples]):.2f} s (raw: program "
            f"{median([r.program_cpu for r in raw]):.2f} s, reader "
            f"{median([r.reader_cpu for r in raw]):.2f} s)"
        ),
        samples=tuple(cpus),
        baseline_samples=tuple(r.cpu for r in raw),
    )
    return rate, cpu


def _against_one(subject: Subject, samples: Sequence[Sample], one: Sequence[Sample]) -> str:
    """The rate over the same tool's one-client rate, per run."""
    if subject.clients == 1:
        return ""
    ratios = [
        s.rate / o.rate
        for s, o in zip(samples, one, strict=False)
        if s.rate is not None and o.rate is not None
    ]
    return f"{median(ratios):.2f}x its 1-client rate" if ratios else ""


def _checked(subject: Subject, samples: Sequence[Sample]) -> str:
    """What the byte counts, the lost markers and the skips say."""
    n = len(samples)
    parts = []
    if not subject.keeper.transparent:
        parts.append("not byte-checked (draws its own screen)")
    else:
        bad = [s.wrong for s in samples if s.wrong]
        parts.append(
            f"byte count WRONG in {len(bad)} of {n} runs ({sum(bad)} of "
            f"{n * subject.clients} terminals)"
            if bad
            else f"byte count exact on every terminal, {n} runs"
        )
    lost = [s.lost for s in samples if s.lost]
    if lost:
        parts.append(
            f"the marker never reached {sum(lost)} terminal(s), in {len(lost)} of {n} runs"
            " (those runs have no rate)"
        )
    told = [b for s in samples for b in s.skipped if b is not None]
    silent = sum(1 for s in samples for b in s.skipped if b is None)
    if silent:
        parts.append(f"{silent} client(s) did not say on detaching what they skipped")
    if told:
        skipped = [b for b in told if b]
        parts.append(
            f"told they skipped (Skipped): {len(skipped)} of {len(told)} clients, "
            f"median {median(skipped) / MIB:.1f} MiB of those, at most "
            f"{max(skipped) / MIB:.1f} MiB, a redraw in their feed in its place"
            if skipped
            else "no client was skipped"
        )
        unexplained = sum(
            1
            for s in samples
            for right, missed in zip(s.right, s.skipped, strict=True)
            if not right and missed == 0
        )
        if any(s.wrong for s in samples):
            parts.append(
                f"{unexplained} WRONG count(s) of a client never told it skipped"
                if unexplained
                else "every wrong count is a client told it skipped"
            )
    return "; ".join(parts)
