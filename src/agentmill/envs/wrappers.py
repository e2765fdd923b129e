"""Wrappers around a :class:`~agentmill.envs.base.TextEnv`: the no-repeat control, a step limit, and a Gymnasium face.

- :class:`UniqueObsWrapper` makes observations unique the way API outputs are (request ids, timestamps), so no
  state repeats across a group's rollouts. G2PO then collapses to GRPO (property P1, g2po README): it is the AppWorld
  pattern **[S]** and the negative control of experiments G-4/G-6. ``ScrubbedKey(UNIQUE_OBS_PATTERN)`` undoes it
  exactly.
- :class:`TimeLimit` truncates an episode after a number of steps.
- :func:`as_gymnasium` returns a real ``gymnasium.Env`` (optional extra ``gymnasium``) with ``spaces.Text``
  observation and action spaces that passes ``gymnasium.utils.env_checker.check_env``.
"""

from __future__ import annotations

import random
import re
import unicodedata
from datetime import datetime, timedelta, timezone
from typing import Any

from agentmill.core.seeding import derive_seed
from agentmill.envs.base import TextEnv

UNIQUE_OBS_PATTERN = r"\n\[request [0-9a-f]{8} at \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\]"
"""Regex matching exactly what :class:`UniqueObsWrapper` appends (so removing every match restores the
observation and the description byte for byte)."""

_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Wrapper:
    """Base of the wrappers: forwards ``reset``/``step``/``close`` and unknown attributes to ``env``."""

    def __init__(self, env: TextEnv) -> None:
        self.env = env

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()

    @property
    def unwrapped(self) -> Any:
        """The innermost environment."""
        env = self.env
        while isinstance(env, Wrapper):
            env = env.env
        return env

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not yet set: avoid infinite recursion during construction/unpickling
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


class UniqueObsWrapper(Wrapper):
    """Append ``[request <8 hex> at <ISO timestamp>]`` to the observation and ``info["description"]``.

    Args:
        env: the wrapped environment.
        p: probability that a given observation gets the tag (a fresh one is drawn every step). ``p = 1`` makes
            every observation unique; ``p = 0`` is the identity.
        keep_initial: leave o_0 untouched (the "shared task prompt" case: the first node is shared by the group).
        seed: base seed. ``reset(seed=s)`` restarts the tag stream from (seed, s), so two rollouts reset with
            different seeds draw different tags and one reset with the same seed repeats them.

    The oracle namespace is left alone: the true state does not change, only what the agent sees.
    """

    def __init__(self, env: TextEnv, p: float = 1.0, keep_initial: bool = False, seed: int = 0) -> None:
        super().__init__(env)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"UniqueObsWrapper: p must be in [0, 1], got {p}")
        self.p = float(p)
        self.keep_initial = keep_initial
        self.seed = seed
        self._rng = random.Random(derive_seed("unique-obs", seed))
        self._clock = _EPOCH

    def _tag(self, obs: str, info: dict) -> tuple[str, dict]:
        if self._rng.random() >= self.p:
            return obs, info
        self._clock += timedelta(seconds=self._rng.randint(1, 90))
        tag = f"\n[request {self._rng.getrandbits(32):08x} at {self._clock.strftime('%Y-%m-%dT%H:%M:%SZ')}]"
        info = dict(info)
        if isinstance(info.get("description"), str):
            info["description"] = info["description"] + tag
        return obs + tag, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self._rng = random.Random(derive_seed("unique-obs", self.seed, seed))
        self._clock = _EPOCH + timedelta(seconds=self._rng.randrange(365 * 24 * 3600))
        if self.keep_initial:
            return obs, info
        return self._tag(obs, info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._tag(obs, info)
        return obs, reward, terminated, truncated, info


class TimeLimit(Wrapper):
    """Truncate after ``max_steps`` steps (``truncated=True`` unless the step also terminated)."""

    def __init__(self, env: TextEnv, max_steps: int) -> None:
        super().__init__(env)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"TimeLimit: max_steps must be an integer >= 1, got {max_steps!r}")
        self.max_steps = max_steps
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        self._t = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        if self._t >= self.max_steps and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info


def make_keydoor_unique(*, p: float = 1.0, keep_initial: bool = False, seed: int = 0, **keydoor_kwargs: Any
                        ) -> UniqueObsWrapper:
    """Registry factory for ``keydoor-unique-v0``: KeyDoor under :class:`UniqueObsWrapper`."""
    from agentmill.envs.keydoor import make_keydoor

    return UniqueObsWrapper(make_keydoor(**keydoor_kwargs), p=p, keep_initial=keep_initial, seed=seed)


# ---------------------------------------------------------------------------------------------------------------
# Gymnasium

GYM_CHARSET = "".join(chr(c) for c in range(32, 127)) + "\n"
"""Printable ASCII plus newline: gymnasium's default ``Text`` charset is alphanumeric only."""

GYM_MAX_LENGTH = 4096
"""Longest observation or action string of the gymnasium spaces [R]."""

_NOT_IN_CHARSET = re.compile(r"[^\x20-\x7e\n]")


def ascii_normalise(text: str, max_length: int = GYM_MAX_LENGTH) -> str:
    """Map text into :data:`GYM_CHARSET`: accents are decomposed and dropped (NFKD), tabs and other characters
    become spaces, and the result is cut to ``max_length`` characters."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _NOT_IN_CHARSET.sub(" ", text)[:max_length]


def as_gymnasium(env: TextEnv, *, max_length: int = GYM_MAX_LENGTH) -> Any:
    """A ``gymnasium.Env`` over ``env`` with ``spaces.Text`` observations and actions (gymnasium 1.x).

    Observations are ASCII-normalised into :data:`GYM_CHARSET` (see :func:`ascii_normalise`); actions are passed
    through as strings (a string the world does not know is an invalid command, not an error). ``info`` is the
    environment's own, oracle included: the Gymnasium face is for users' own loops, not for estimators.
    """
    try:
        import gymnasium
        from gymnasium import spaces
    except ImportError as exc:  # pragma: no cover - the extra is installed in CI
        raise ImportError("as_gymnasium needs gymnasium: pip install 'agentmill[gymnasium]'") from exc

    class TextGymEnv(gymnasium.Env):
        metadata = {"render_modes": []}

        def __init__(self) -> None:
            self.text_env = env
            self.observation_space = spaces.Text(max_length=max_length, min_length=0, charset=GYM_CHARSET)
            self.action_space = spaces.Text(max_length=max_length, min_length=0, charset=GYM_CHARSET)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
            super().reset(seed=seed)
            obs, info = self.text_env.reset(seed=seed, options=options)
            return ascii_normalise(obs, max_length), info

        def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
            obs, reward, terminated, truncated, info = self.text_env.step(str(action))
            return ascii_normalise(obs, max_length), float(reward), bool(terminated), bool(truncated), info

        def close(self) -> None:
            self.text_env.close()

    return TextGymEnv()
