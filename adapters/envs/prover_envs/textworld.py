"""TextWorld text games as restorable environments (extra ``textworld``: ``textworld>=1.7``).

Games are generated and compiled locally from a seed (:class:`CookingGame`, TextWorld's
``tw-cooking`` challenge: fetch the ingredients, cut and cook them as the cookbook says, prepare
and eat the meal; a wrong cut, a wrong or second cooking, or eating an ingredient loses). Compiled
games are cached on disk by their settings, so a spec names a game anywhere.

An episode is named by a reset spec::

    {"game": {"challenge": "tw-cooking", "seed": 3, "recipe": 2, ...}, "max_steps": 40}
    {"game_file": "/path/to/game.z8", "max_steps": 40}

:class:`TextWorldEnv` is a plain :class:`~prover_core.restore.Env`: the observation is the game's
text feedback (status-line noise removed), ``Step.info`` holds the admissible commands
(``"actions"``), the remaining oracle plan (``"plan"``), score, moves, won and lost; the binary reward
is *won*. An episode ends when the game is won or lost, or after ``max_steps`` commands (a failure).
The game engine is deterministic, so :func:`replay_env` (reset, replay the recorded commands, check
every observation) restores exactly; :func:`snapshot_env` forks a replayed game with TextWorld's
``env.copy()``. TextWorld is imported when the first game is made or played.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Awaitable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from prover_core.protocols import PolicyContext, Step
from prover_core.restore import Env, ReplayEnv, SnapshotEnv

_STATUS_LINE = re.compile(r"^>?\s*-= .+ =-\s*\d+/\d+\s*$", re.MULTILINE)
_PROMPT_LINE = re.compile(r"^>\s*$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")


def _textworld() -> ModuleType:
    try:
        return importlib.import_module("textworld")
    except ImportError as exc:
        raise ImportError("prover_envs.textworld needs textworld: pip install 'prover-envs[textworld]'") from exc


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence jericho's warnings that TextWorld's games are not among its supported games (harmless:
    TextWorld computes scores and admissible commands itself)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r".*(not fully supported|Unable to retrieve walkthrough|"
            r"Unable to find valid actions).*",
        )
        yield


def default_cache_dir() -> Path:
    """``$PROVER_CACHE_DIR/textworld``, else ``~/.cache/prover-core/textworld``."""
    root = os.environ.get("PROVER_CACHE_DIR")
    return Path(root) / "textworld" if root else Path.home() / ".cache" / "prover-core" / "textworld"


def clean_feedback(text: str) -> str:
    """The game's feedback without the status line (room, score/moves) and the bare prompt.

    The status line counts moves, so two runs reaching the same state by different paths would
    otherwise never show the same observation.
    """
    text = _PROMPT_LINE.sub("", _STATUS_LINE.sub("", text))
    return _BLANK_RUNS.sub("\n\n", text).strip()


@dataclass(frozen=True)
class GameFile:
    """A compiled game: its file, TextWorld's walkthrough, and the oracle plan from the start.

    ``plan`` (TextWorld's ``policy_commands`` at reset) is a shortest command sequence that wins;
    ``scoring`` are the walkthrough's commands that raise the score when it is played (the game's own
    milestones: in ``tw-cooking``, taking an ingredient, cooking or cutting it as the recipe says,
    preparing and eating the meal): its key commands.
    """

    path: str
    walkthrough: tuple[str, ...]
    plan: tuple[str, ...]
    scoring: tuple[str, ...]


@dataclass(frozen=True)
class CookingGame:
    """Settings of a ``tw-cooking`` game; the same settings always give the same game.

    ``recipe`` ingredients, ``take`` of them to be found, ``go`` rooms (1, 6, 9 or 12), and whether
    containers must be opened, ingredients cooked and cut (the cooking and cutting make it losable).
    """

    seed: int
    recipe: int = 2
    take: int = 1
    go: Literal[1, 6, 9, 12] = 1
    open: bool = True
    cook: bool = True
    cut: bool = True
    split: Literal["train", "valid", "test"] = "train"

    def __post_init__(self) -> None:
        if not 1 <= self.recipe <= 5:
            raise ValueError(f"recipe must be between 1 and 5 ingredients, got {self.recipe}")
        if not 0 <= self.take <= self.recipe:
            raise ValueError(f"take must be between 0 and recipe ({self.recipe}), got {self.take}")
        if self.go not in (1, 6, 9, 12):
            raise ValueError(f"go must be 1, 6, 9 or 12 rooms, got {self.go}")

    @property
    def spec(self) -> dict[str, Any]:
        """The JSON form used in reset specs (``{"challenge": "tw-cooking", ...}``)."""
        return {"challenge": "tw-cooking", **asdict(self)}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> CookingGame:
        if spec.get("challenge") != "tw-cooking":
            raise ValueError(f"unknown game challenge {spec.get('challenge')!r}; only 'tw-cooking' is generated")
        names = {f.name for f in fields(cls)}
        unknown = set(spec) - names - {"challenge"}
        if unknown:
            raise ValueError(f"unknown tw-cooking settings {sorted(unknown)}")
        return cls(**{k: v for k, v in spec.items() if k in names})

    @property
    def name(self) -> str:
        """A file name that identifies the settings and the TextWorld version."""
        version = getattr(_textworld(), "__version__", "unknown")
        digest = hashlib.sha256(json.dumps([version, self.spec], sort_keys=True).encode()).hexdigest()[:12]
        return f"tw-cooking-s{self.seed}-{digest}"

    def compile(self, cache_dir: str | os.PathLike[str] | None = None) -> str:
        """Generate and compile the game (about a second) unless cached; return the ``.z8`` path."""
        directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        target = directory / f"{self.name}.z8"
        if target.is_file() and target.with_suffix(".json").is_file():
            return str(target)
        textworld = _textworld()
        cooking = importlib.import_module("textworld.challenges.tw_cooking.cooking")
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            options = textworld.GameOptions()
            options.seeds = self.seed
            options.path = str(Path(tmp) / target.name)
            options.force_recompile = True
            settings = {
                "recipe": self.recipe,
                "take": self.take,
                "go": self.go,
                "open": self.open,
                "cook": self.cook,
                "cut": self.cut,
                "drop": False,
                "recipe_seed": self.seed,
                "split": self.split,
            }
            with _quiet():
                game = cooking.make(settings, options)
                built = Path(textworld.generator.compile_game(game, options))
            # the .json (game data) first, the .z8 last: a present .z8 means a complete entry
            os.replace(built.with_suffix(".json"), target.with_suffix(".json"))
            os.replace(built, target)
        return str(target)


def load_game(path: str) -> GameFile:
    """Read a compiled game's walkthrough and oracle plan, and play the walkthrough to find what scores."""
    textworld = _textworld()
    infos = textworld.EnvInfos(policy_commands=True, score=True, extras=["walkthrough"])
    with _quiet():
        env = textworld.start(path, request_infos=infos)
        try:
            state = env.reset()
            walkthrough = tuple(state.get("extra.walkthrough") or ())
            plan = tuple(state["policy_commands"] or ())
            scoring = []
            for command in walkthrough:
                score = state["score"]
                state, _, _ = env.step(command)
                if state["score"] > score:
                    scoring.append(command)
        finally:
            env.close()
    return GameFile(path=path, walkthrough=walkthrough, plan=plan, scoring=tuple(scoring))


def make_cooking_game(seed: int, cache_dir: str | os.PathLike[str] | None = None, **settings: Any) -> GameFile:
    """Generate (or take from the cache) the ``tw-cooking`` game of ``seed`` and ``settings``."""
    return load_game(CookingGame(seed=seed, **settings).compile(cache_dir))


class TextWorldEnv:
    """A TextWorld game behind the :class:`~prover_core.restore.Env` protocol.

    ``max_steps`` is the command budget when the spec gives none; ``cache_dir`` is where games
    named by settings are compiled; ``game_dir``, when given, the directory a spec's ``game_file`` must lie in
    (a reset spec comes from a trajectory: without it, it may name any file; docs/security.md). The observation
    is :func:`clean_feedback` of the game's text.
    """

    def __init__(
        self,
        *,
        max_steps: int = 50,
        cache_dir: str | os.PathLike[str] | None = None,
        game_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        self.default_max_steps = max_steps
        self.cache_dir = cache_dir
        self.game_dir = Path(game_dir).resolve() if game_dir is not None else None
        self.env: Any = None
        self.path: str | None = None
        self.max_steps = max_steps
        self.steps = 0

    def game_file(self, spec: Mapping[str, Any]) -> str:
        """The game a reset spec names (compiling it if it is named by settings)."""
        if "game_file" in spec:
            path = str(spec["game_file"])
            if self.game_dir is not None and not Path(path).resolve().is_relative_to(self.game_dir):
                raise ValueError(f"the reset spec's game_file {path!r} is not inside game_dir {str(self.game_dir)!r}")
            return path
        if "game" in spec:
            return CookingGame.from_spec(spec["game"]).compile(self.cache_dir)
        raise ValueError("a TextWorld reset spec needs 'game_file' (a path) or 'game' (tw-cooking settings)")

    def reset(self, spec: Mapping[str, Any]) -> Step:
        path = self.game_file(spec)
        max_steps = int(spec.get("max_steps", self.default_max_steps))
        if max_steps < 1:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        if self.env is None or self.path != path:
            self.close()
            textworld = _textworld()
            infos = textworld.EnvInfos(
                admissible_commands=True,
                policy_commands=True,
                won=True,
                lost=True,
                score=True,
                max_score=True,
                moves=True,
            )
            with _quiet():
                self.env = textworld.start(path, request_infos=infos)
            self.path = path
        self.max_steps, self.steps = max_steps, 0
        with _quiet():
            return self._step(self.env.reset())

    def step(self, action: Any) -> Step:
        if self.env is None:
            raise RuntimeError("step() before reset()")
        if not isinstance(action, str):
            raise TypeError(f"a TextWorld action is a command string, got {action!r}")
        with _quiet():
            state, _score, _done = self.env.step(action)
        self.steps += 1
        return self._step(state)

    def _step(self, state: Any) -> Step:
        won, lost = bool(state["won"]), bool(state["lost"])
        done = won or lost or self.steps >= self.max_steps
        info = {
            "actions": tuple(state["admissible_commands"] or ()),
            "plan": tuple(state["policy_commands"] or ()),
            "score": int(state["score"]),
            "max_score": int(state["max_score"]),
            "moves": self.steps,
            "won": won,
            "lost": lost,
        }
        return Step(observation=clean_feedback(state.feedback), done=done, success=won, info=info)

    def reseed(self, seed: int) -> None:
        """Nothing to reseed: a TextWorld game is deterministic (saying so keeps restorers from warning)."""

    def copy(self) -> TextWorldEnv:
        """An exact fork of the running game (TextWorld's ``env.copy()``)."""
        twin = TextWorldEnv(max_steps=self.default_max_steps, cache_dir=self.cache_dir, game_dir=self.game_dir)
        twin.env = self.env.copy() if self.env is not None else None
        twin.path, twin.max_steps, twin.steps = self.path, self.max_steps, self.steps
        return twin

    def close(self) -> None:
        """Close the running game, if any (the restorers call this on every ``TextWorldEnv`` they made)."""
        env, self.env, self.path = self.env, None, None
        if env is not None:
            env.close()


def _copy(env: Env) -> Env:
    if not isinstance(env, TextWorldEnv):
        raise TypeError(f"expected a TextWorldEnv, got {type(env).__name__}")
    return env.copy()


def replay_env(
    *,
    max_steps: int = 50,
    cache_dir: str | os.PathLike[str] | None = None,
    game_dir: str | os.PathLike[str] | None = None,
) -> ReplayEnv:
    """Restore a game by replaying the recorded commands from its start, checking every observation."""
    return ReplayEnv(lambda: TextWorldEnv(max_steps=max_steps, cache_dir=cache_dir, game_dir=game_dir))


def snapshot_env(
    *,
    max_steps: int = 50,
    cache_dir: str | os.PathLike[str] | None = None,
    max_snapshots: int = 64,
    game_dir: str | os.PathLike[str] | None = None,
) -> SnapshotEnv:
    """Restore a game by forking (``env.copy()``) a snapshot replayed once per boundary."""
    return SnapshotEnv(
        lambda: TextWorldEnv(max_steps=max_steps, cache_dir=cache_dir, game_dir=game_dir),
        copy_env=_copy,
        max_snapshots=max_snapshots,
    )


@runtime_checkable
class TextPolicy(Protocol):
    """A policy over text games: it reads the context and returns a command string.

    ``context.observation`` is the game's feedback, ``context.info["actions"]`` the admissible
    commands; sampling must draw from ``context.rng`` (seeded per continuation).
    """

    def act(self, context: PolicyContext) -> str | Awaitable[str]: ...


_OBJECT = re.compile(r"^\S+\s+(.+?)(?:\s+(?:with|from|on|into|in|to)\s+.+)?$")


def command_object(command: str) -> str | None:
    """The object a command acts on: ``"slice pork chop with knife"`` -> ``"pork chop"``."""
    match = _OBJECT.match(command.strip())
    return match.group(1) if match else None


class WalkthroughFollower:
    """Epsilon-greedy over the oracle: the next plan command with probability ``1 - epsilon``, otherwise a
    uniformly random admissible command (which may lose the game).

    With ``explore="related"`` the random command is drawn among the admissible commands that act on
    the plan command's object (an agent unsure what to do with the thing at hand: ``dice`` instead of
    ``slice``, the oven instead of the stove, eating it), falling back to any admissible command.
    Every choice draws one uniform number and, when exploring, one index, so a seed fixes the behaviour.
    """

    def __init__(self, epsilon: float, explore: Literal["any", "related"] = "any") -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        if explore not in ("any", "related"):
            raise ValueError(f"explore must be 'any' or 'related', got {explore!r}")
        self.epsilon = epsilon
        self.explore = explore

    def choose(self, info: Mapping[str, Any], rng: np.random.Generator) -> str:
        plan: tuple[str, ...] = tuple(info.get("plan") or ())
        actions: tuple[str, ...] = tuple(info.get("actions") or ())
        explore = rng.random() < self.epsilon
        if (explore or not plan) and actions:
            pool = actions
            if self.explore == "related" and plan:
                thing = command_object(plan[0])
                related = tuple(a for a in actions if thing and command_object(a) == thing)
                pool = related or actions
            return pool[int(rng.integers(len(pool)))]
        if plan:
            return plan[0]
        return "look"

    def act(self, context: PolicyContext) -> str:
        return self.choose(context.info, context.rng)


__all__ = [
    "CookingGame",
    "GameFile",
    "TextPolicy",
    "TextWorldEnv",
    "WalkthroughFollower",
    "clean_feedback",
    "command_object",
    "default_cache_dir",
    "load_game",
    "make_cooking_game",
    "replay_env",
    "snapshot_env",
]
