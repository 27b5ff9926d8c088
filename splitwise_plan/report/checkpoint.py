"""A sweep's or a plan's results kept as they finish, so that a stopped run resumes where it stopped.

The file (``OUTPUT.partial`` beside the run's first output file; a plan that writes no file keeps it
in the user cache folder, see :func:`plan_cache_path`) holds one JSON line with
the fingerprint of the run's inputs, then one line per finished piece of work: a sweep's
design point (a :class:`~splitwise_plan.sim.simulator.SimulationResult`) or a plan's design (a
:class:`~splitwise_plan.planning.planner.DesignPlan`). Each is appended and flushed to disk as it
finishes; a line cut short by a crash is ignored. The same command run again finds the file,
checks that its inputs are the same (else starts afresh) and does only the work still missing;
the file is removed once the run's outputs are written.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from splitwise_plan.inputs.paths import file_sha256

FORMAT = "splitwise-plan {kind} checkpoint"
VERSION = 1
CACHE_ENV = "SPLITWISE_PLAN_CACHE_DIR"   # the user cache folder, in place of $XDG_CACHE_HOME/splitwise-plan


def _point_of(d: dict):
    """A sweep's line: its result, keyed by (prompt, token) machines."""
    from splitwise_plan.sim.simulator import SimulationResult

    r = SimulationResult.from_record(d)
    if not all(
            type(n) is int and n >= 0 for n in (r.prompt_machines, r.token_machines)):
        raise TypeError("not a simulation result")
    return (r.prompt_machines, r.token_machines), r


def _design_of(d: dict):
    """A plan's line: a design's answer, keyed by the design's name; or a simulation of a design it was
    planning when stopped (a :class:`~splitwise_plan.planning.memo.Kept`), keyed by what it answers."""
    from splitwise_plan.planning import DesignPlan
    from splitwise_plan.planning.memo import Kept

    if d.get("type") == "Kept":
        k = Kept.from_record(d)
        return k.key, k
    p = DesignPlan.from_record(d)
    if not isinstance(p.design, str):
        raise TypeError("not a design's answer")
    return p.design, p


def _encode(x) -> dict:
    """A line of any kind: a SimulationResult, a DesignPlan or a Kept simulation, each as its own record."""
    return x.to_record()


def _pieces(results) -> int:
    """How many of ``results`` are pieces of work (a sweep's points, a plan's designs), not simulations
    kept of a design unfinished."""
    from splitwise_plan.planning.memo import Kept

    return sum(1 for r in results if not isinstance(r, Kept))


_DECODERS = {"sweep": _point_of, "plan": _design_of}


def _by_content(options: dict, keys) -> dict:
    """``options`` with each of ``keys`` that names a file replaced by the digest of its contents: the
    same file given by another path (relative, absolute, from another folder) is the same input."""
    out = dict(options)
    for key in keys:
        path = out.get(key)
        if isinstance(path, (str, os.PathLike)) and str(path) and Path(path).is_file():
            out[key] = "sha256:" + file_sha256(path)
    return out


def fingerprint(inputs: dict, stream, design: str, **extra) -> str:
    """A digest of everything a sweep's results depend on: the inputs block of its report (its user
    files by their contents), the request stream itself, the design and ``extra``."""
    inputs = _by_content(inputs, ("workload", "trace", "slo_file", "machines_file", "profiles_file"))
    h = hashlib.sha256()
    h.update(json.dumps({"inputs": inputs, "design": design, **extra}, sort_keys=True, default=str).encode())
    for a in (stream.arrival_s, stream.prompt_tokens, stream.output_tokens):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def plan_fingerprint(req, version: str) -> str:
    """A digest of everything a plan's answers for its designs depend on: the request's options (but
    which designs, its workers and its storage; its files by their contents) and the tool's
    ``version``. A design's answer does not depend on the other designs planned beside it."""
    from dataclasses import fields

    options = {f.name: getattr(req, f.name) for f in fields(req) if f.name not in ("designs", "jobs", "storage", "study")}
    options = _by_content(options, ("workload", "trace", "slos", "machines_file", "profiles"))
    return hashlib.sha256(json.dumps({"request": options, "version": version}, sort_keys=True,
                                     default=str).encode()).hexdigest()


def stopped_note(ckpt: "Checkpoint | None", total: int, run: str, pieces: str, others: int = 0,
                 also: str = "", cache: "Path | str | None" = None) -> str | None:
    """What a stopped ``run`` ("sweep", "plan") says of its ``pieces`` done (of ``total``; the file also
    holds ``others``, of runs that name them): where they are kept, or that nothing is (it writes no
    file, and, for a run that keeps them in the ``cache`` folder then, that folder cannot be written:
    ``also``, another way to keep them); None when its file could not be written (it said so then)."""
    done = ckpt.kept - others if ckpt is not None and ckpt.owned else 0
    if ckpt is None and cache is not None:
        return (f"stopped: nothing is kept, since the {run} writes no file and cannot write to {cache} (set "
                f"{CACHE_ENV} to a folder it can write, or give a --csv, --json or --plot FILE to keep the "
                f"{pieces} done beside it; the same command then goes on from them{also})")
    if ckpt is None:
        return (f"stopped: nothing is kept, since the {run} writes no file (a --csv, --json or --plot FILE keeps "
                f"the {pieces} done beside it, and the same command goes on from them{also})")
    if ckpt.failed:
        return None
    if not done and not ckpt.owned and not ckpt.simulations:
        return f"stopped before any of its {pieces} finished: nothing is kept"
    sims = f", with {ckpt.simulations:,} simulations of the others" if ckpt.simulations and done < total else ""
    return (f"stopped: {done:,} of {total:,} {pieces} are kept in {ckpt.path}{sims}; the same command goes on "
            "from there")


def plan_cache_dir() -> Path | None:
    """Where plans that write no file keep their checkpoints: ``plans/`` in the user cache folder,
    ``$SPLITWISE_PLAN_CACHE_DIR`` (tests and CI point it elsewhere), else ``$XDG_CACHE_HOME/splitwise-plan``
    (``~/.cache/splitwise-plan``; a relative XDG_CACHE_HOME is ignored, as the XDG spec asks). None
    where there is no home folder to find it in. Nothing is made here."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser().absolute() / "plans"
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    except (RuntimeError, KeyError):   # (no HOME, and no entry in the password database)
        return None
    return base / "splitwise-plan" / "plans"


def plan_cache_path(digest: str) -> Path | None:
    """Where a plan that writes no file keeps its checkpoint: ``<digest prefix>.partial`` in
    :func:`plan_cache_dir`, keyed by the plan's inputs (:func:`plan_fingerprint`: the same command finds
    it again; the file's header holds the whole digest). The folder is made if missing; None where it
    cannot be made or written (the plan then keeps nothing, and says so when stopped)."""
    folder = plan_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return None
    return folder / f"{digest[:16]}.partial"


def path_for(*outputs) -> Path | None:
    """Where a sweep keeps its checkpoint: beside its first output file (None: no file output; standard
    output, a device or a pipe is none: a checkpoint beside /dev/stdout would land in /dev)."""
    from splitwise_plan.errors import SplitwisePlanError
    from splitwise_plan.report.files import is_stdout, not_a_file
    for out in outputs:
        if out is not None and str(out) != "-" and not is_stdout(out) and not not_a_file(Path(out)):
            p = Path(out)
            where = p.with_name(p.name + ".partial")
            for other in outputs:
                if other is not None and str(other) != "-" and Path(other).absolute() == where.absolute():
                    raise SplitwisePlanError(f"{other} is where the run keeps its progress, beside {out}; "
                                             "give that report another name")
            return where
    return None


class Checkpoint:
    """The finished work of one sweep (``kind`` "sweep": its design points) or plan ("plan": its designs), on disk.

    The file is this run's once it is started (:meth:`start`, or :meth:`keep` at the run's first finished
    work) or found to be this run's own (:meth:`load`); only then is it written to or removed. Another
    file found there is moved aside when this run starts its own (or simply replaced, when it holds no
    work). ``say`` prints what happens to the file (a note for the user).
    """

    def __init__(self, path: Path, digest: str, say: Callable[[str], None] | None = None,
                 kind: str = "sweep") -> None:
        self.path, self.digest, self.say, self.kind = Path(path), digest, say, kind
        self.format = FORMAT.format(kind=kind)
        self.failed: str | None = None   # why the file could not be written (the run goes on without it)
        self.kept = 0                    # results the file holds (a sweep's points, a plan's designs)
        self.simulations = 0             # and simulations of a plan's designs unfinished
        self._lock = threading.RLock()   # a plan's search threads keep their simulations as they finish
        self.owned = False               # the file is this run's: started by it, or found to be its own
        self.loaded: dict = {}           # what load() found of this run's (to keep when the file is rewritten)
        self._other: tuple | None = None   # (why a file found there is not this run's, whether it holds work)

    def _note(self, text: str | None) -> None:
        if text and self.say is not None:
            self.say(text)

    def _fail(self, exc: OSError) -> None:
        """Stop writing the file, and say why once."""
        self.failed = f"cannot keep the {self.kind}'s progress in {self.path}: {exc.strerror or exc}"
        self._note(self.failed)

    def load(self) -> dict:
        """The results kept by an earlier run of the same sweep (by (prompt, token) machines) or plan
        (by design). A file that is not this run's is left as it is until the run starts its own."""
        import stat

        decode = _DECODERS[self.kind]
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self._note(f"ignoring {self.path}: {exc.strerror or exc}")
            return {}
        if stat.S_ISDIR(mode):
            self._note(f"ignoring {self.path}: it is a folder")
            return {}
        if not stat.S_ISREG(mode):   # a pipe or a device: never read (it may never end)
            self._other = ("it is not a regular file", False)
            return {}
        try:
            with self.path.open() as f:
                lines = f.read().splitlines()
        except OSError as exc:
            self._note(f"ignoring {self.path}: {exc.strerror or exc}")
            return {}
        except UnicodeDecodeError:
            self._other = ("it is not a checkpoint of splitwise-plan (not text)", True)
            return {}
        if not lines:
            self._other = ("it is empty", False)
            return {}
        try:
            head = json.loads(lines[0])
        except (ValueError, RecursionError):
            head = None
        fmt = head.get("format") if isinstance(head, dict) else None
        words = fmt.split() if isinstance(fmt, str) else []
        if len(words) != 3 or fmt != FORMAT.format(kind=words[1]) or words[1] not in _DECODERS:
            self._other = ("it is not a checkpoint of splitwise-plan", True)
            return {}
        if fmt != self.format:
            self._other = (f"it is a {words[1]}'s checkpoint", len(lines) > 1)
            return {}
        if head.get("version") != VERSION:
            self._other = ("it was made by another version of splitwise-plan", len(lines) > 1)
            return {}
        if head.get("fingerprint") != self.digest:
            self._other = (f"it was made by a {self.kind} with other inputs", len(lines) > 1)
            return {}
        done = {}
        for line in lines[1:]:
            try:
                key, r = decode(json.loads(line))
                done[key] = r
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                continue                       # cut short by a crash, or not a result
        self.owned, self.kept, self.loaded = True, _pieces(done.values()), done
        self.simulations = len(done) - self.kept
        return done

    def _set_aside(self, why: str) -> str:
        """Move a file that is not this run's checkpoint out of the way (to ``.old``, or ``.old.2`` and on
        when that is taken), so that starting afresh loses nothing another run kept there; the note."""
        old = self.path.with_name(self.path.name + ".old")
        k = 1
        while os.path.lexists(old):
            k += 1
            old = self.path.with_name(f"{self.path.name}.old.{k}")
        try:
            os.replace(self.path, old)
        except OSError:
            return f"ignoring {self.path}: {why}; starting afresh over it"
        return f"ignoring {self.path}: {why}; moved it to {old} and starting afresh"

    def start(self, kept: Iterable = ()) -> None:
        """Begin the file afresh: the header, then the results ``kept`` from an earlier run (saying so
        when another run's file had to be moved out of the way first)."""
        if self._other is not None:
            why, has_work = self._other
            self._other = None
            if has_work:
                self._note(self._set_aside(why))
        kept = list(kept)
        lines = [json.dumps({"format": self.format, "version": VERSION, "fingerprint": self.digest})]
        lines += [json.dumps(_encode(r)) for r in kept]
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text("\n".join(lines) + "\n")
            os.replace(tmp, self.path)
            self.kept, self.owned = _pieces(kept), True
            self.simulations = len(kept) - self.kept
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            self._fail(exc)

    def keep(self, results: Iterable) -> None:
        """Add finished results, starting the file first (with what :meth:`load` found of this run's) if
        they are the run's first: only work done makes the file the run's, so a run stopped before any,
        or by bad input, leaves another run's file where it was."""
        with self._lock:
            if not self.owned and not self.failed:
                self.start(self.loaded.values())
            self.add(results)

    def finish(self, others: list, pieces: str) -> None:
        """The run's outputs are written: remove the file, unless it holds ``others`` (``pieces`` that
        this run did not name, kept for the run that does)."""
        if others and self.owned:
            shown = ", ".join(map(str, others)) if len(others) <= 4 else f"{len(others):,} {pieces}"
            self._note(f"kept {self.path}: it holds {shown}, which this run does not name")
        else:
            self.remove()

    def add(self, results: Iterable) -> None:
        """Append finished results and push them to disk (nothing once writing has failed)."""
        results = list(results)
        lines = [json.dumps(_encode(r)) + "\n" for r in results]
        with self._lock:
            self._append(results, lines)

    def _append(self, results: list, lines: list) -> None:
        if self.failed:
            return
        try:
            with self.path.open("a") as f:
                f.write("".join(lines))
                f.flush()   # (a stopped or killed process loses nothing written)
                if _pieces(results):   # and a crashed machine loses no finished piece (a plan's simulations
                    os.fsync(f.fileno())   # come too often to wait for the disk each time)
            self.kept += _pieces(results)
            self.simulations += len(results) - _pieces(results)
        except OSError as exc:
            self._fail(exc)

    def remove(self) -> None:
        """Remove the file, if it is this run's."""
        if not self.owned:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
