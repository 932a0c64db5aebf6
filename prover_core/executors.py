"""Executors: where continuations run. Each is a :data:`~prover_core.continuations.Continuer`
(``async (trajectory, turn, seed) -> Outcome``), handed to ``compute_bonus(..., executor=...)``.

* :class:`LocalExecutor` (in process): runs ``env`` + ``policy`` (or a ``continue_from`` hook) on the
  event loop, or with ``threads=N`` in up to ``N`` daemon threads so that blocking environments overlap.
* :class:`RayExecutor` (``pip install 'prover-core[ray]'``): a pool of Ray actors, each building and
  holding its own environment and policy from picklable factories. The restore state travels in one
  of two forms, each put in Ray's object store once: a replay spec (the recorded
  :class:`~prover_core.data.Trajectory`: its ``reset`` spec and actions), from which the worker restores
  with its own :class:`~prover_core.protocols.RestorableEnv` (``ReplayEnv``, or ``SnapshotEnv`` caching
  per worker); or, with ``snapshots=SnapshotEnv(...)``, a pickled snapshot of the live episode at the
  boundary, replayed once on the driver and unpickled as a fresh copy (then reseeded) for every
  continuation, for environments whose replay is slow but whose state pickles.

Failures are typed, so that verification counts them by kind: the turn limit raises
:class:`~prover_core.errors.ContinuationLimitError`, the wall-time limit
:class:`~prover_core.errors.ContinuationTimeoutError` (the Ray worker is then killed and replaced,
so a continuation that never ends cannot hold a worker), a dead worker
:class:`~prover_core.errors.WorkerLostError` (replaced too), anything raised by the environment or
the policy :class:`~prover_core.errors.ContinuationError` (or :class:`~prover_core.errors.RestoreError`).
A thread cannot be killed: a blocking continuation past its wall-time limit is abandoned (counted as
timed out) and its thread finishes on its own; use the Ray executor for environments that can hang.

Setup errors are raised, not counted: a worker whose factories fail or build objects that miss their
protocol (a plain ``reset``/``step`` environment where a :class:`RestorableEnv` is needed) raises
:class:`~prover_core.errors.ProtocolError` / :class:`~prover_core.errors.UsageError`, and asking
for more Ray CPUs than the cluster has raises :class:`~prover_core.errors.ResourceError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from prover_core._aio import in_thread
from prover_core.continuations import Continuer, make_continuer
from prover_core.data import Outcome, Trajectory
from prover_core.errors import (
    ContinuationError,
    ContinuationLimitError,
    ContinuationTimeoutError,
    InvalidOutcomeError,
    ProtocolError,
    ResourceError,
    RestoreError,
    UsageError,
    WorkerLostError,
)
from prover_core.protocols import BatchPolicy, ContinueFn, Policy, RestorableEnv
from prover_core.restore import LiveEpisode, SnapshotEnv, _Owned, content_key

RestorableEnvFactory = Callable[[], RestorableEnv]
PolicyFactory = Callable[[], Policy | BatchPolicy]
HookFactory = Callable[[], ContinueFn]


def _run_to_end(continuer: Continuer, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
    """One continuation on a fresh event loop (in a worker thread or a Ray worker)."""

    async def go() -> Outcome:  # the library's own continuers (env_continuer, hook_continuer) all take replay
        return await continuer(trajectory, turn, seed, replay=replay)

    return asyncio.run(go())


class LocalExecutor:
    """Runs continuations in this process.

    ``threads=0`` (default) awaits each continuation on the caller's event loop (right for async
    policies and environments, which then overlap); ``threads=N`` runs each one to completion on its
    own event loop in a daemon thread of its own, at most ``N`` at once, so that blocking ``step``
    calls overlap. ``timeout_s`` bounds each continuation's wall time once it has started (not its
    wait for a free thread); with ``threads=0`` it makes synchronous user code run in threads of its
    own so that the limit holds while it blocks. A continuation past its limit is abandoned: its
    thread runs on (a daemon: it never keeps the interpreter from exiting) and no longer counts
    against ``N``, so one hanging environment cannot starve the continuations after it.
    """

    def __init__(
        self,
        env: RestorableEnv | None = None,
        policy: Policy | BatchPolicy | None = None,
        *,
        continue_from: ContinueFn | None = None,
        max_turns: int = 100,
        threads: int = 0,
        timeout_s: float | None = None,
    ) -> None:
        if threads < 0:
            raise ValueError("threads must be >= 0")
        threaded = timeout_s is not None and not threads
        self._continuer = make_continuer(env, policy, continue_from, max_turns=max_turns, threaded=threaded)
        self.metered = continue_from is None  # env + policy: run_continuation ticks the PolicyClock, in threads too
        self.timeout_s = timeout_s
        self.threads = threads
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._closed = False
        self._label = "a continuation of " + (
            f"continue_from {getattr(continue_from, '__qualname__', type(continue_from).__name__)}"
            if continue_from is not None
            else f"{type(env).__name__} with {type(policy).__name__}"
        )

    def _slot(self) -> asyncio.Semaphore:
        """This event loop's limit of ``threads`` continuations in flight (one loop at a time)."""
        loop = asyncio.get_running_loop()
        if loop not in self._slots:
            self._slots = {loop: asyncio.Semaphore(self.threads)}
        return self._slots[loop]

    async def __call__(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        """One continuation from ``s_turn``; ``replay`` as in :func:`~prover_core.continuations.run_continuation`."""
        if self._closed:
            raise UsageError("this LocalExecutor was shut down; make a new one")
        if not self.threads:
            return await self._limited(self._continuer(trajectory, turn, seed, replay=replay))
        async with self._slot():
            running = in_thread(_run_to_end, self._continuer, trajectory, turn, seed, replay, label=self._label)
            return await self._limited(running)

    async def _limited(self, call: Awaitable[Outcome]) -> Outcome:
        if self.timeout_s is None:
            return await call
        try:
            return await asyncio.wait_for(call, self.timeout_s)
        except asyncio.TimeoutError as exc:
            raise ContinuationTimeoutError(f"continuation ran past {self.timeout_s} s of wall time") from exc

    def shutdown(self) -> None:
        """Refuse new continuations (running ones finish, or are abandoned at their time limit)."""
        self._closed = True


class _Restored:
    """A :class:`RestorableEnv` over one already restored episode (a snapshot unpickled on a worker). The unpickled
    copy is this continuation's own: ``owned`` closes its environment once the episode ends or is garbage."""

    def __init__(self, episode: LiveEpisode, owned: _Owned) -> None:
        self.episode = episode
        episode.release = owned.own(episode, episode.env)

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> LiveEpisode:
        reseed = getattr(self.episode.env, "reseed", None)
        if reseed is not None:
            reseed(seed)
        return self.episode


class _Worker:
    """The body of a Ray actor: builds its own env + policy (or hook) once, then runs continuations.

    A setup failure is kept and reported by :meth:`ping` and every run (as ``("usage", ...)``), so
    that the driver raises it instead of counting a dead worker per continuation.
    """

    def __init__(self, factories: bytes, max_turns: int) -> None:
        self.setup_error: tuple[str, str] | None = None
        self.owned = _Owned("RayExecutor's worker")
        """The snapshot copies this worker unpickled and has not closed yet (``owned.failures``: closes that raised)."""
        self.continuer: Continuer | None = None
        self.policy: Policy | BatchPolicy | None = None
        self.max_turns = max_turns
        try:
            make_env, make_policy, make_hook = pickle.loads(factories)
            self.env = make_env() if make_env is not None else None
            self.policy = make_policy() if make_policy is not None else None
            self.hook = make_hook() if make_hook is not None else None
            if self.policy is not None and not isinstance(self.policy, Policy | BatchPolicy):
                raise ProtocolError(
                    f"make_policy built a {type(self.policy).__name__}, "
                    "which has no act(context) or act_batch(contexts)"
                )
            if self.hook is not None or self.env is not None:
                self.continuer = make_continuer(self.env, self.policy, self.hook, max_turns=max_turns)
        except Exception as exc:
            self.setup_error = (type(exc).__name__, f"the Ray worker's setup failed: {type(exc).__name__}: {exc}")

    def ping(self) -> tuple[str, str] | None:
        """``None`` when the worker is ready, else its setup error (type name, message)."""
        return self.setup_error

    def run(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> tuple[str, Any, Any]:
        """``("ok", success, turns)`` or ``(error kind, type name, message)``; errors never escape raw."""
        if self.setup_error is not None:
            return ("usage", *self.setup_error)
        if self.continuer is None:
            return ("error", "ValueError", "this worker has no environment; send snapshots")
        return _guarded(self.continuer, trajectory, turn, seed, replay)

    def run_snapshot(
        self, snapshot: bytes, trajectory: Trajectory, turn: int, seed: int, replay: int = 0
    ) -> tuple[str, Any, Any]:
        """Like :meth:`run`, from a pickled episode in state ``s_turn`` (a fresh copy per call)."""
        if self.setup_error is not None:
            return ("usage", *self.setup_error)
        if self.policy is None:
            return ("error", "ValueError", "snapshots need make_policy")
        try:
            episode = pickle.loads(snapshot)
        except Exception as exc:
            return ("restore", type(exc).__name__, f"could not unpickle the snapshot: {exc}")
        restored = make_continuer(_Restored(episode, self.owned), self.policy, max_turns=self.max_turns)
        return _guarded(restored, trajectory, turn, seed, replay)


def _guarded(
    continuer: Continuer, trajectory: Trajectory, turn: int, seed: int, replay: int = 0
) -> tuple[str, Any, Any]:
    try:
        outcome = _run_to_end(continuer, trajectory, turn, seed, replay)
    except UsageError as exc:
        return ("usage", type(exc).__name__, str(exc))
    except InvalidOutcomeError as exc:
        return ("invalid_outcome", type(exc).__name__, str(exc))
    except ContinuationLimitError as exc:
        return ("turn_limit", type(exc).__name__, str(exc))
    except RestoreError as exc:
        return ("restore", type(exc).__name__, str(exc))
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", bool(outcome.success), int(outcome.turns))


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("RayExecutor needs Ray: pip install 'prover-core[ray]'") from exc
    return ray


class _Slot:
    """One Ray actor and whether its process is known to be up."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.started = False


class RayExecutor:
    """Runs continuations on ``num_workers`` Ray actors, one continuation per actor at a time.

    Give picklable factories: ``make_restorable_env`` (returns a
    :class:`~prover_core.protocols.RestorableEnv`, e.g. ``lambda: SnapshotEnv(make_env)``) and
    ``make_policy`` (each worker calls them once and keeps the results), or ``make_continue_from``.
    Ray must be initialised (``ray.init``) or it starts a
    local instance on first use. A worker that dies, or is killed after ``timeout_s``, is replaced;
    the continuation it was running fails with :class:`WorkerLostError` or
    :class:`ContinuationTimeoutError` and is counted, never retried silently. The wall-time limit
    starts once the worker's process is up (a new worker gets ``startup_timeout_s`` to start).
    With ``snapshots`` (a driver-side :class:`~prover_core.restore.SnapshotEnv`) workers receive
    pickled snapshots instead of replaying, and need only ``make_policy``.
    """

    def __init__(
        self,
        make_restorable_env: RestorableEnvFactory | None = None,
        make_policy: PolicyFactory | None = None,
        *,
        make_continue_from: HookFactory | None = None,
        num_workers: int = 2,
        max_turns: int = 100,
        timeout_s: float | None = None,
        num_cpus_per_worker: float = 1.0,
        cached_trajectories: int = 256,
        startup_timeout_s: float = 120.0,
        snapshots: SnapshotEnv | None = None,
    ) -> None:
        if snapshots is not None:
            if make_policy is None or make_continue_from is not None:
                raise ValueError("snapshots need make_policy (and no make_continue_from)")
        elif make_continue_from is None and (make_restorable_env is None or make_policy is None):
            raise ValueError("RayExecutor needs make_restorable_env and make_policy, or make_continue_from")
        if make_continue_from is not None and (make_restorable_env is not None or make_policy is not None):
            raise ValueError("give either make_continue_from or make_restorable_env and make_policy, not both")
        if num_workers < 1:
            raise ValueError("num_workers must be >= 1")
        for name, factory in (
            ("make_restorable_env", make_restorable_env),
            ("make_policy", make_policy),
            ("make_continue_from", make_continue_from),
        ):
            if factory is not None and not callable(factory):
                raise ProtocolError(f"{name} must be a picklable factory (a callable), got a {type(factory).__name__}")
        ray = _ray()
        if not ray.is_initialized():
            ray.init()
        cpus = float(ray.cluster_resources().get("CPU", 0.0))
        if num_workers * num_cpus_per_worker > cpus:
            raise ResourceError(
                f"{num_workers} Ray workers x {num_cpus_per_worker} CPU need {num_workers * num_cpus_per_worker:g} "
                f"CPUs but the Ray cluster has {cpus:g}: the extra workers would never start. Use fewer workers "
                "or a fractional num_cpus_per_worker"
            )
        from ray import cloudpickle  # Ray's own copy; pickles lambdas and closures

        pickler: Any = cloudpickle
        self._factories: bytes = pickler.dumps((make_restorable_env, make_policy, make_continue_from))
        self.max_turns = max_turns
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.num_workers = num_workers
        self._actor_cls = ray.remote(num_cpus=num_cpus_per_worker, max_restarts=0)(_Worker)
        self._slots: list[_Slot] = [self._spawn() for _ in range(num_workers)]
        self._idle: list[_Slot] = list(self._slots)
        self._cond: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._refs: OrderedDict[Any, Any] = OrderedDict()
        self._cached = cached_trajectories
        self.snapshots = snapshots
        self._pickler: Any = cloudpickle
        self.workers_lost = 0
        self.workers_killed = 0

    def _spawn(self) -> _Slot:
        return _Slot(self._actor_cls.remote(self._factories, self.max_turns))

    def ready(self, timeout_s: float = 120.0) -> None:
        """Block until every worker has started (optional; the first continuations wait otherwise).

        Raises :class:`UsageError` (:class:`ProtocolError` for objects that miss their protocol) when
        a worker's setup failed.
        """
        for error in _ray().get([slot.handle.ping.remote() for slot in self._slots], timeout=timeout_s):
            _raise_setup_error(error)
        for slot in self._slots:
            slot.started = True

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._cond is None or self._loop is not loop:  # compute_bonus may run each step on a fresh loop
            self._cond, self._loop = asyncio.Condition(), loop
        return self._cond

    def _object_ref(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` in Ray's object store, put once per ``key`` (least recently used dropped)."""
        with self._lock:
            ref = self._refs.get(key)
            if ref is None:
                ref = _ray().put(make())
                self._refs[key] = ref
                if len(self._refs) > self._cached:
                    self._refs.popitem(last=False)
            else:
                self._refs.move_to_end(key)
            return ref

    def _submit(self, slot: _Slot, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Any:
        """Send the restore state: the trajectory as a replay spec, or a pickled snapshot of ``s_turn``."""
        digest = content_key(trajectory, trajectory.num_turns - 1)  # ids may be reused across steps
        spec = self._object_ref((trajectory.id, digest) if digest else trajectory, lambda: trajectory)
        if self.snapshots is None:
            return slot.handle.run.remote(spec, turn, seed, replay)
        snapshots = self.snapshots

        def pickled() -> bytes:
            blob: bytes = self._pickler.dumps(snapshots.snapshot(trajectory, turn))
            return blob

        key = content_key(trajectory, turn)
        snap = self._object_ref(("snapshot", key) if key else (trajectory, turn), pickled)
        return slot.handle.run_snapshot.remote(snap, spec, turn, seed, replay)

    async def _acquire(self) -> _Slot:
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: bool(self._idle))
            return self._idle.pop()

    async def _release(self, slot: _Slot) -> None:
        cond = self._condition()
        async with cond:
            self._idle.append(slot)
            cond.notify()

    def _replace(self, slot: _Slot) -> _Slot:
        with contextlib.suppress(Exception):  # already dead
            _ray().kill(slot.handle, no_restart=True)
        fresh = self._spawn()
        self._slots = [s for s in self._slots if s is not slot] + [fresh]
        return fresh

    async def _wait(self, ref: Any, timeout: float | None) -> Any:
        waiting = asyncio.wrap_future(ref.future())
        return await (waiting if timeout is None else asyncio.wait_for(waiting, timeout))

    async def _run(
        self, slot: _Slot, trajectory: Trajectory, turn: int, seed: int, replay: int = 0
    ) -> tuple[_Slot, tuple[str, Any, Any]]:
        """Run one continuation on ``slot``; returns the slot to put back (a replacement if it died)."""
        ray = _ray()
        if not slot.started:
            try:
                setup_error = await self._wait(slot.handle.ping.remote(), self.startup_timeout_s)
            except (asyncio.TimeoutError, ray.exceptions.RayError) as exc:
                self.workers_lost += 1
                lost = WorkerLostError(f"a Ray worker did not start: {type(exc).__name__}")
                raise _Lost(self._replace(slot), lost) from None
            _raise_setup_error(setup_error)
            slot.started = True
        try:
            result = await self._wait(self._submit(slot, trajectory, turn, seed, replay), self.timeout_s)
        except asyncio.TimeoutError:
            self.workers_killed += 1
            error: ContinuationError = ContinuationTimeoutError(
                f"continuation ran past {self.timeout_s} s of wall time; its Ray worker was killed"
            )
            raise _Lost(self._replace(slot), error) from None
        except ray.exceptions.RayActorError as exc:
            self.workers_lost += 1
            error = WorkerLostError(f"the Ray worker died during the continuation: {type(exc).__name__}")
            raise _Lost(self._replace(slot), error) from None
        except ray.exceptions.RayError as exc:
            raise _Lost(slot, ContinuationError(f"Ray failed the continuation: {type(exc).__name__}: {exc}")) from None
        return slot, result

    async def __call__(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        """One continuation from ``s_turn`` on a worker (``replay``: see
        :func:`~prover_core.continuations.run_continuation`)."""
        slot = await self._acquire()
        try:
            slot, (status, a, b) = await self._run(slot, trajectory, turn, seed, replay)
        except _Lost as lost:
            slot = lost.slot
            raise lost.error from None
        finally:
            await self._release(slot)
        if status == "ok":
            return Outcome(success=bool(a), turns=int(b))
        if status == "usage":
            _raise_setup_error((a, b))
        message = f"continuation raised on a Ray worker: {a}: {b}"
        if status == "invalid_outcome":
            raise InvalidOutcomeError(message)
        if status == "turn_limit":
            raise ContinuationLimitError(message)
        if status == "restore":
            raise RestoreError(message)
        raise ContinuationError(message)

    def stats(self) -> dict[str, int]:
        """Workers, and how many were lost (died) or killed (after a timeout) so far."""
        return {"workers": self.num_workers, "workers_lost": self.workers_lost, "workers_killed": self.workers_killed}

    def shutdown(self) -> None:
        """Kill every worker."""
        ray = _ray()
        for slot in self._slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.handle, no_restart=True)
        self._slots, self._idle = [], []


def _raise_setup_error(error: tuple[str, str] | None) -> None:
    """Raise a worker's setup error on the driver (typed: protocol errors stay :class:`ProtocolError`)."""
    if error is None:
        return
    name, message = error
    raise (ProtocolError if name in ("ProtocolError", "TypeError") else UsageError)(message)


class _Lost(Exception):
    """Internal: a continuation failed and ``slot`` is what goes back to the pool."""

    def __init__(self, slot: _Slot, error: ContinuationError) -> None:
        super().__init__(str(error))
        self.slot, self.error = slot, error


__all__ = ["LocalExecutor", "RayExecutor"]
