"""Episode bookkeeping transforms: RewardSum (episode returns) and InitTracker (first steps)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.core._fast import lookup, put
from tdrl.envs.core._keys import key_tuple
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeyNotFoundError, KeysArg, key_list, key_prefix, with_prefix
from tdrl.specs import Categorical, Composite, Unbounded

__all__ = ["InitTracker", "RewardSum"]


class RewardSum(Transform):
    """Sums the rewards of each episode: ``episode_reward`` per reward key, reset per group.

    For every reward key the running sum is written under ``out_keys`` (default: the reward's
    prefix plus ``"episode_<name>"``, e.g. ``("agents", "episode_reward")``). After a reset it
    is 0 where the reward's done group resets (the deepest group whose prefix holds the key)
    and unchanged elsewhere; at each step the reward is added to the root's sum. The sums are
    declared in the observation and the state spec (they are read back from the root).

    Args:
        in_keys: reward keys (default: every reward key of the env).
        out_keys: where the sums go (default: ``episode_<name>`` next to each reward).
        reset_keys: the ``_reset`` key that restarts each sum, one per reward key (one key is
            used for all); default: the ``_reset`` key of the reward's done group.
        reward_spec: must stay ``False`` (keyword-only): the sums are observations, read back
            from the root at each step; declaring them as rewards is not supported.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=3), RewardSum())
        >>> env.rollout(5)["next", "episode_reward"].flatten().tolist()
        [1.0, 2.0, 3.0]
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        reset_keys: KeysArg = None,
        *,
        reward_spec: bool = False,
    ) -> None:
        if reward_spec:
            raise NotImplementedError(
                f"RewardSum.__init__: sums declared as rewards are not supported (got "
                f"reward_spec={reward_spec!r}; expected False: they are observations). Drop "
                "reward_spec; read the sums from the observations."
            )
        super().__init__()
        self.reset_keys = None if reset_keys is None else key_list(reset_keys)
        self._auto_in = in_keys is None
        self._auto_out = out_keys is None
        self.in_keys = key_list(in_keys)
        self.out_keys = key_list(out_keys)
        if not self._auto_in and not self._auto_out and len(self.in_keys) != len(self.out_keys):
            raise ValueError(
                f"RewardSum.__init__: in_keys and out_keys differ in length (got {self.in_keys} "
                f"and {self.out_keys}; expected one sum per reward). Pass as many keys."
            )
        self._zeros: list[tuple[torch.Size, torch.dtype]] = []
        self._paths: tuple[Any, list[tuple[tuple[str, ...], tuple[str, ...]]]] | None = None

    def _bind(self, parent: EnvBase) -> None:
        if self._auto_in:
            self.in_keys = list(parent.reward_keys)
        if self._auto_out:
            self.out_keys = [_episode_key(k) for k in self.in_keys]
        if self.reset_keys is not None and len(self.reset_keys) not in (1, len(self.in_keys)):
            raise ValueError(
                f"RewardSum.reset_keys: one _reset key per reward key is needed (got reset_keys="
                f"{self.reset_keys} for in_keys={self.in_keys}). Pass one key, or one per reward."
            )
        groups = [g.reset for g in parent.done_groups]
        for key in self.reset_keys or ():
            if key not in groups:
                raise KeyNotFoundError(
                    f"RewardSum.reset_keys: {key!r} is not a _reset key of the env (got "
                    f"reset_keys={self.reset_keys}; available: {groups}). Pass the env's keys."
                )
        rewards = parent.full_reward_spec
        self._zeros = [
            (rewards[k].shape, rewards[k].dtype)
            if k in rewards
            else (torch.Size(parent.batch_size), torch.float32)
            for k in self.in_keys
        ]

    def _sum_specs(self, spec: Composite) -> Composite:
        rewards = self._require_parent("transform_observation_spec").full_reward_spec
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            leaf = rewards.get(in_key, None)
            if leaf is None:
                raise KeyNotFoundError(
                    f"RewardSum.in_keys: {in_key!r} is not a reward key of the env below (got "
                    f"in_keys={self.in_keys}; available reward keys: {rewards.keys(True, True)})."
                    " Pass reward keys."
                )
            spec[out_key] = Unbounded(shape=leaf.shape, dtype=leaf.dtype, device=leaf.device)
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._sum_specs(observation_spec)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._sum_specs(state_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return reward_spec

    def _reset_key(self, i: int) -> NestedKey | None:
        if self.reset_keys is None:
            return None
        return self.reset_keys[0 if len(self.reset_keys) == 1 else i]

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for i, (out_key, (shape, dtype)) in enumerate(zip(self.out_keys, self._zeros)):
            zeros = torch.zeros(shape, dtype=dtype, device=tensordict_out.device)
            new = self._where_reset(tensordict_in, out_key, zeros, reset_key=self._reset_key(i))
            tensordict_out.set(out_key, new)
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        paths = self._paths
        if paths is None or paths[0] != (self.in_keys, self.out_keys):  # keys set after _bind
            paths = self._paths = (
                (list(self.in_keys), list(self.out_keys)),
                [(key_tuple(i), key_tuple(o)) for i, o in zip(self.in_keys, self.out_keys)],
            )
        for (in_key, out_key), (in_path, out_path) in zip(
            zip(self.in_keys, self.out_keys), paths[1]
        ):
            prev = lookup(tensordict, out_path)
            if prev is None:
                raise self._missing_key(out_key, tensordict, "_step")
            reward = lookup(next_tensordict, in_path)
            if reward is None:
                raise self._missing_key(in_key, next_tensordict, "_step")
            put(next_tensordict, out_path, prev + reward)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")


def _episode_key(key: NestedKey) -> NestedKey:
    name = key if isinstance(key, str) else key[-1]
    return with_prefix(key_prefix(key), f"episode_{name}")


class InitTracker(Transform):
    """Marks the first step of each episode: ``is_init`` per done group.

    ``(*prefix, init_key)`` (boolean, the group's done shape) is true right after a reset where
    the group resets, unchanged where it does not, and false after every step. Recurrent
    policies use it to reset their hidden state.

    Args:
        init_key: leaf name of the flag.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=2), InitTracker())
        >>> td = env.rollout(4, break_when_any_done=False)
        >>> td["is_init"].flatten().tolist()
        [True, False, True, False]
    """

    def __init__(self, init_key: str = "is_init") -> None:
        super().__init__()
        self.init_key = init_key
        self._groups: list[tuple[NestedKey, torch.Size]] = []

    def _bind(self, parent: EnvBase) -> None:
        done = parent.full_done_spec
        self._groups = [
            (with_prefix(g.prefix, self.init_key), done[g.done].shape) for g in parent.done_groups
        ]
        self.out_keys = [k for k, _ in self._groups]

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key, shape in self._groups:
            observation_spec[key] = Categorical(
                2, shape=shape, dtype=torch.bool, device=observation_spec.device
            )
        return observation_spec

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for key, shape in self._groups:
            ones = torch.ones(shape, dtype=torch.bool, device=tensordict_out.device)
            tensordict_out.set(key, self._where_reset(tensordict_in, key, ones))
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key, shape in self._groups:
            next_tensordict.set(
                key, torch.zeros(shape, dtype=torch.bool, device=next_tensordict.device)
            )
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def extra_repr(self) -> str:
        return f"init_key={self.init_key!r}"
