"""Restoration helpers: turn a plain resettable environment into a :class:`RestorableEnv`.

* :class:`ReplayEnv` re-creates the state before turn ``t`` by resetting with the trajectory's
  recorded ``reset`` spec and replaying its actions ``0..t-1``, checking every observation against
  the record. A mismatch raises :class:`ReplayMismatchError`: continuing from a state that is not the
  recorded one would verify, and credit, the wrong thing.
* :class:`SnapshotEnv` replays once per boundary and then hands out copies of that snapshot, for
  environments whose state can be copied (``copy.deepcopy`` by default).

After restoring, both call ``env.reseed(seed)`` when the environment has it, so that the future
randomness of each continuation is its own (see :meth:`RestorableEnv.restore`). An environment
without ``reseed`` gives the K continuations from one state the same environment randomness (only
the policy's differs): a stochastic one then biases ``Delta``. ``missing_reseed`` says what happens:
``"warn"`` (default; one warning on the ``prover_core`` logger per restorer), ``"error"``
(:class:`~prover_core.errors.MissingReseedError`) or ``"ignore"``. A deterministic environment
declares itself with a no-op ``reseed``.

Observations are compared by :func:`observations_equal`: equal, or equal once both are in the form
JSON gives them (tuples and arrays as lists), so a trajectory loaded from JSON still replays; a NaN
matches a NaN there (``nan != nan`` would fail every replay of an observation holding one).

A restorer owns the environments it makes (``make_env()`` and the snapshots' copies) and closes each once, when it
has the optional hook ``close()`` (:class:`~prover_core.protocols.Closable`): a continuation's when its episode ends
(a ``done`` step) or its ``step`` raises, one that failed to restore at once, and any other (a continuation stopped,
timed out or cancelled, a snapshot evicted or cleared) when its episode is garbage, or at the latest at the
restorer's ``close()`` (also a context manager). A ``close()`` that raises is counted in ``close_failures`` and
logged once, never raised: the continuation's outcome stands.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
import pickle
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from prover_core.data import Trajectory, json_plain
from prover_core.errors import MissingReseedError, ProtocolError, ProverError, ReplayMismatchError, RestoreError
from prover_core.protocols import Closable, Step, described

__all__ = [
    "Env",
    "LiveEpisode",
    "MissingReseed",
    "ReplayEnv",
    "SnapshotEnv",
    "content_key",
    "describe_difference",
    "observations_equal",
]

logger = logging.getLogger("prover_core")

MissingReseed = Literal["warn", "error", "ignore"]
"""What a restorer does with an environment without ``reseed(seed)``: warn, raise, or ignore."""


@runtime_checkable
class Env(Protocol):
    """A plain environment that can be reset from a spec; the input of the restoration helpers.

    It may also define ``reseed(seed: int) -> None`` to reseed its randomness from now on; a
    stochastic environment without it gives every continuation from one snapshot the same future.
    """

    def reset(self, spec: Mapping[str, Any]) -> Step: ...

    def step(self, action: Any) -> Step: ...


@dataclass
class LiveEpisode:
    """An :class:`~prover_core.protocols.Episode` over a plain :class:`Env`.

    ``release`` closes ``env`` (set by the restorer that made it): the episode calls it once its ``step`` ends the
    episode or raises. Without it (an environment someone else owns) nothing is closed. A copy or an unpickled
    episode owns nothing.
    """

    env: Env
    last: Step
    release: Callable[[], object] | None = field(default=None, repr=False, compare=False)

    def step(self, action: Any) -> Step:
        try:
            self.last = self.env.step(action)
        except BaseException:
            self.close()
            raise
        if self.last.done:
            self.close()
        return self.last

    def close(self) -> None:
        """Close ``env`` if this episode's restorer made it (at most once); leave it open otherwise."""
        if self.release is not None:
            self.release()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "release": None}


class _Owned:
    """The environments one restorer made and has not closed yet.

    Each is closed once: when :meth:`own`'s returned function is called, when its holder is garbage, or by
    :meth:`close_all`. A ``close()`` that raises is counted (``failures``) and logged once, never raised.
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.failures = 0
        self._lock = threading.RLock()  # a finalizer may run inside a locked block of the same thread
        self._open: dict[int, weakref.finalize[Any, Any]] = {}
        self._count = 0

    def __reduce__(self) -> tuple[type[_Owned], tuple[str]]:
        return (_Owned, (self.owner,))  # what it holds stays in this process

    def own(self, holder: object, env: Env) -> Callable[[], object] | None:
        """Close ``env`` once ``holder`` is garbage, or when the returned function is called (``None``: nothing to
        close, ``env`` has no ``close()``)."""
        if not isinstance(env, Closable):
            return None
        with self._lock:
            key, self._count = self._count, self._count + 1
            done = weakref.finalize(holder, self._release, key, env)
            done.atexit = False
            self._open[key] = done
        return done

    def _release(self, key: int, env: Closable) -> None:
        with self._lock:
            self._open.pop(key, None)
        self.close(env)

    def close(self, env: object) -> None:
        """``env.close()`` when it has one; a raising close is counted and logged (the first time)."""
        if not isinstance(env, Closable):
            return
        try:
            env.close()
        except Exception as exc:
            with self._lock:
                self.failures += 1
                first = self.failures == 1
            if first:
                logger.warning(
                    f"{type(env).__name__}.close() raised {type(exc).__name__}: {exc}; the continuation's outcome is "
                    f"kept. {self.owner}.close_failures counts these (further ones are not logged)."
                )

    def close_all(self) -> None:
        """Close every environment still open."""
        with self._lock:
            pending = list(self._open.values())
        for done in pending:
            done()


def observations_equal(expected: Any, got: Any) -> bool:
    """``expected == got``, or equal after :func:`~prover_core.data.json_plain` (arrays compare whole)."""
    try:
        same = expected == got
        if isinstance(same, np.ndarray):  # an array on either side compares elementwise
            same = same.shape == np.shape(expected) == np.shape(got) and bool(same.all())
        if same is True or (isinstance(same, bool | np.bool_) and bool(same)):
            return True
    except Exception:  # objects whose == raises
        pass
    try:
        return _same(json_plain(expected), json_plain(got))
    except TypeError:
        return False


def _same(a: Any, b: Any) -> bool:
    """Equality of JSON-plain values in which NaN equals NaN: replay reproduces a NaN, it cannot equal it."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def describe_difference(expected: Any, got: Any, limit: int = 40) -> str:
    """Where two observations first differ: a character, an index or a key (``""`` if not found)."""
    try:
        a, b = json_plain(expected), json_plain(got)
    except TypeError:
        return ""
    path = ""
    while True:
        if isinstance(a, str) and isinstance(b, str):
            c = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            where = f"{path} " if path else ""
            return f"first difference at {where}character {c}: {a[c : c + limit]!r} != {b[c : c + limit]!r}"
        if isinstance(a, list) and isinstance(b, list):
            i = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            if i is None:
                return f"first difference at {path or 'top'}: lengths {len(a)} != {len(b)}"
            a, b, path = a[i], b[i], f"{path}[{i}]"
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                return f"first difference at {path or 'top'}: keys {sorted(a.keys() ^ b.keys())} in only one"
            key = next(k for k in a if a[k] != b[k])
            a, b, path = a[key], b[key], f"{path}[{key!r}]"
            continue
        return f"first difference at {path or 'top'}: {a!r} != {b!r}" if path else ""


class ReplayEnv:
    """Restores by deterministic replay of the recorded actions, checking each observation."""

    def __init__(
        self,
        make_env: Callable[[], Env],
        observation_equal: Callable[[Any, Any], bool] = observations_equal,
        missing_reseed: MissingReseed = "warn",
    ) -> None:
        if missing_reseed not in ("warn", "error", "ignore"):
            raise ValueError(f"missing_reseed must be 'warn', 'error' or 'ignore', got {missing_reseed!r}")
        self.make_env = make_env
        self.observation_equal = observation_equal
        self.missing_reseed = missing_reseed
        self._warned = False
        self._owned = _Owned(type(self).__name__)

    @property
    def close_failures(self) -> int:
        """How many ``close()`` calls of environments it made raised (each counted, the first logged)."""
        return self._owned.failures

    def close(self) -> None:
        """Close every environment it made that is still open (it stays usable)."""
        self._owned.close_all()

    def __enter__(self) -> ReplayEnv:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def reseed(self, env: Env, seed: int) -> None:
        """``env.reseed(seed)``; an environment without it is warned about or refused (``missing_reseed``)."""
        reseed = getattr(env, "reseed", None)
        if reseed is not None:
            try:
                reseed(seed)
            except Exception as exc:
                raise RestoreError(f"{type(env).__name__}.reseed({seed}) raised {type(exc).__name__}: {exc}") from exc
            return
        message = (
            f"{type(env).__name__} has no reseed(seed): every continuation from one restored state gets the "
            "same environment randomness, so the K continuations of a stochastic environment are identical "
            "and Delta is biased. Give it reseed(seed) (a no-op if it is deterministic)"
        )
        if self.missing_reseed == "error":
            raise MissingReseedError(message)
        if self.missing_reseed == "warn" and not self._warned:
            self._warned = True
            logger.warning(message + "; missing_reseed='ignore' silences this.")

    def replay(self, trajectory: Trajectory, turn: int) -> LiveEpisode:
        """A fresh episode in state ``s_turn``, or :class:`RestoreError` / :class:`ReplayMismatchError`."""
        if not 0 <= turn < trajectory.num_turns:
            raise RestoreError(
                f"cannot restore trajectory {trajectory.id!r} before turn {turn}: "
                f"it has turns 0..{trajectory.num_turns - 1}"
            )
        try:
            env = self.make_env()
            if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
                raise ProtocolError(  # a setup error for every group alike: refused, never a skip per group
                    f"make_env() returned {described(env)}, which has no reset(spec) and step(action): ReplayEnv and "
                    "SnapshotEnv replay an environment through them (docs/environments.md)"
                )
            try:
                step = env.reset(trajectory.reset)
                for t in range(turn + 1):
                    self._check(trajectory, t, step)
                    if t < turn:
                        step = env.step(trajectory.turns[t].action)
            except BaseException:
                self._owned.close(env)
                raise
        except ProverError:
            raise
        except Exception as exc:  # the user's environment failed: say where
            raise RestoreError(
                f"environment raised while restoring trajectory {trajectory.id!r} to turn {turn}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return self.episode(env, step)

    def episode(self, env: Env, last: Step) -> LiveEpisode:
        """A :class:`LiveEpisode` over ``env``, which this restorer made and will close."""
        episode = LiveEpisode(env=env, last=last)
        episode.release = self._owned.own(episode, env)
        return episode

    def _check(self, trajectory: Trajectory, t: int, step: Step) -> None:
        expected = trajectory.turns[t].observation
        if not self.observation_equal(expected, step.observation):
            detail = describe_difference(expected, step.observation)
            raise ReplayMismatchError(trajectory.id, t, expected, step.observation, detail)
        if step.done:
            raise RestoreError(f"replay of trajectory {trajectory.id!r} ended before turn {t}")

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> LiveEpisode:
        episode = self.replay(trajectory, turn)
        _reseeded(self, episode, seed)
        return episode


def _reseeded(replay: ReplayEnv, episode: LiveEpisode, seed: int) -> None:
    """``replay.reseed(episode.env, seed)``, closing the episode's environment if that raises."""
    try:
        replay.reseed(episode.env, seed)
    except BaseException:
        episode.close()
        raise


def content_key(trajectory: Trajectory, turn: int) -> str | None:
    """A digest of what fixes state ``s_turn``: the reset spec, the actions before ``turn`` and the
    observations up to it. ``None`` when they do not pickle (then nothing is cached)."""
    prefix = trajectory.turns[: turn + 1]
    content = (trajectory.reset, [t.action for t in prefix[:-1]], [t.observation for t in prefix])
    try:
        blob = pickle.dumps(content, protocol=5)
    except Exception:
        return None
    return hashlib.sha256(blob).hexdigest()


class SnapshotEnv:
    """Restores by copying a snapshot taken once per boundary (replaying to it the first time).

    ``copy_env`` copies a live environment exactly, including its random generator; ``max_snapshots``
    bounds the cache (least recently used snapshots are dropped). Snapshots are keyed by
    :func:`content_key`, not by trajectory id, so a trainer that reuses ids across steps never
    restores another episode's state; ``compute_bonus`` also clears the cache at each call.
    A snapshot dropped from the cache is closed once no restore is copying it; :meth:`close` closes all.
    """

    def __init__(
        self,
        make_env: Callable[[], Env],
        copy_env: Callable[[Env], Env] = copy.deepcopy,
        observation_equal: Callable[[Any, Any], bool] = observations_equal,
        max_snapshots: int = 1024,
        missing_reseed: MissingReseed = "warn",
    ) -> None:
        self._replay = ReplayEnv(make_env, observation_equal, missing_reseed)
        self.copy_env = copy_env
        self.max_snapshots = max_snapshots
        self._snapshots: OrderedDict[str, LiveEpisode] = OrderedDict()
        self._lock = threading.Lock()  # continuations may restore from several threads

    content_key = staticmethod(content_key)

    @property
    def close_failures(self) -> int:
        """How many ``close()`` calls of environments it made raised (each counted, the first logged)."""
        return self._replay.close_failures

    def close(self) -> None:
        """Drop every snapshot and close every environment it made that is still open (it stays usable)."""
        self.clear()
        self._replay.close()

    def __enter__(self) -> SnapshotEnv:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def snapshot(self, trajectory: Trajectory, turn: int) -> LiveEpisode:
        key = content_key(trajectory, turn)
        if key is None:
            return self._replay.replay(trajectory, turn)
        with self._lock:
            if key in self._snapshots:
                self._snapshots.move_to_end(key)
                return self._snapshots[key]
        episode = self._replay.replay(trajectory, turn)
        with self._lock:
            episode = self._snapshots.setdefault(key, episode)
            self._snapshots.move_to_end(key)
            while len(self._snapshots) > self.max_snapshots:
                self._snapshots.popitem(last=False)
        return episode

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> LiveEpisode:
        snap = self.snapshot(trajectory, turn)
        try:
            env = self.copy_env(snap.env)
        except Exception as exc:
            raise RestoreError(f"could not copy the environment snapshot: {type(exc).__name__}: {exc}") from exc
        shared = env is snap.env  # a copy_env that shares: the snapshot owns it
        episode = LiveEpisode(env=env, last=snap.last) if shared else self._replay.episode(env, snap.last)
        _reseeded(self._replay, episode, seed)
        return episode

    def clear(self) -> None:
        """Drop every cached snapshot (``compute_bonus`` does at the start of each call); each is closed once no
        restore is copying it."""
        with self._lock:
            self._snapshots.clear()
