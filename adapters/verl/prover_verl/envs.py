"""A verl-agent style environment manager as a :class:`prover_core.restore.Env`, for restoring by replay.

verl-agent drives environments through a manager with ``reset(kwargs) -> (observations, infos)`` and
``step(text_actions) -> (observations, rewards, dones, infos)``, batched over environments, where
``observations`` is a dict of per-environment lists (``"text"``: the prompt with history,
``"anchor"``: the bare observation). :class:`EnvManagerEnv` runs one environment through such a
manager, so :class:`prover_core.ReplayEnv` (or ``SnapshotEnv``) can restore any turn of a recorded
trajectory::

    env = ReplayEnv(lambda: EnvManagerEnv(make_manager))

``make_manager(spec)`` builds a fresh manager over ONE environment for ``trajectory.reset`` (task,
seed, game file: whatever fixes the episode), since managers usually draw tasks from an iterator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prover_core.hosts import Closable, RestoreError, Step


def _first(value: Any, name: str) -> Any:
    try:
        if len(value) != 1:
            raise RestoreError(f"the manager returned {len(value)} {name}; EnvManagerEnv needs exactly one environment")
        return value[0]
    except TypeError as exc:
        raise RestoreError(f"the manager's {name} is not a per-environment sequence: {value!r}") from exc


class EnvManagerEnv:
    """One environment behind a verl-agent style manager, as a plain resettable :class:`~prover_core.Env`.

    The :class:`~prover_core.Step` observation is ``observations[observation_key][0]`` (default the
    history-free ``"anchor"``, which replay compares with the recorded one); ``info`` carries the
    manager's info dict plus the other observation keys (e.g. ``"text"``, the prompt the policy
    sees); ``success`` is ``bool(info[success_key])`` at the end. ``reset_kwargs(spec)`` gives the
    manager's ``reset`` argument (default ``spec.get("reset_kwargs", {})``).
    """

    def __init__(
        self,
        make_manager: Callable[[Mapping[str, Any]], Any],
        observation_key: str = "anchor",
        success_key: str = "won",
        reset_kwargs: Callable[[Mapping[str, Any]], Any] | None = None,
    ) -> None:
        self.make_manager = make_manager
        self.observation_key = observation_key
        self.success_key = success_key
        self.reset_kwargs = reset_kwargs or (lambda spec: dict(spec.get("reset_kwargs", {})))
        self.manager: Any = None

    def _step(self, observations: Mapping[str, Any], info: Mapping[str, Any], done: bool) -> Step:
        if self.observation_key not in observations or observations[self.observation_key] is None:
            raise RestoreError(f"the manager's observations have no {self.observation_key!r} entry")
        extra = {
            k: _first(v, f"{k!r} observations")
            for k, v in observations.items()
            if k != self.observation_key and v is not None
        }
        return Step(
            observation=_first(observations[self.observation_key], f"{self.observation_key!r} observations"),
            done=done,
            success=done and bool(info.get(self.success_key, False)),
            info={**extra, **info},
        )

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.close()  # a manager per episode: the previous one's environments are released first
        self.manager = self.make_manager(spec)
        observations, infos = self.manager.reset(self.reset_kwargs(spec))
        return self._step(observations, _first(infos, "infos"), done=False)

    def step(self, action: Any) -> Step:
        if self.manager is None:
            raise RestoreError("EnvManagerEnv.step before reset")
        observations, _rewards, dones, infos = self.manager.step([action])
        return self._step(observations, _first(infos, "infos"), done=bool(_first(dones, "dones")))

    def close(self) -> None:
        """Close the current manager (verl-agent's ``EnvironmentManagerBase.close`` closes its environments), if it
        has ``close``; the restorers call this when a continuation's episode ends."""
        manager, self.manager = self.manager, None
        if isinstance(manager, Closable):
            manager.close()

    def reseed(self, seed: int) -> None:
        """Reseed the manager's future randomness (``manager.reseed(seed)``) when it has such a method."""
        reseed = getattr(self.manager, "reseed", None)
        if reseed is not None:
            reseed(seed)
