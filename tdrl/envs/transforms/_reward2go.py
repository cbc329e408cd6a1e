"""Return-to-go transforms of the Decision Transformer: Reward2GoTransform and TargetReturn."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeyNotFoundError, KeysArg, key_list, key_prefix, with_prefix
from tdrl.specs import Composite, Unbounded

__all__ = ["Reward2GoTransform", "TargetReturn", "reward_to_go"]


def reward_to_go(reward: torch.Tensor, done: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted sums of the rewards to each trajectory's end, along dim ``-2``.

    ``out[t] = reward[t] + gamma * out[t + 1]`` inside a trajectory; a trajectory ends where
    ``done`` is true and at the last step of the time dim. Computed with a log-depth scan
    (``log2(T)`` vectorised passes), so a million-step buffer takes no Python loop over time.

    Examples:
        >>> reward = torch.ones(6, 1)
        >>> done = torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool)[:, None]
        >>> reward_to_go(reward, done, 0.5).flatten().tolist()
        [1.75, 1.5, 1.0, 1.75, 1.5, 1.0]
    """
    value = reward.clone()
    # y[t] = value[t] + factor[t] * y[t + 1]; doubling the reach of each step per pass.
    factor = (~done.bool()).to(reward.dtype) * gamma
    length = reward.shape[-2]
    reach = 1
    while reach < length:
        head = value[..., :-reach, :] + factor[..., :-reach, :] * value[..., reach:, :]
        value = torch.cat([head, value[..., -reach:, :]], -2)
        scale = factor[..., :-reach, :] * factor[..., reach:, :]
        factor = torch.cat([scale, torch.zeros_like(factor[..., -reach:, :])], -2)
        reach *= 2
    return value


class Reward2GoTransform(Transform):
    """Writes each step's return-to-go (discounted sum of the rewards to the episode's end).

    An inverse transform, as TorchRL's: it runs on data written to a replay buffer
    (``ReplayBuffer(transform=...)``, or a collector's ``postproc=t.inv``) and leaves sampled
    data as it is; an env cannot hold it (the future rewards are unknown there). The time dim
    is dim ``-2`` of the reward (the last batch dim of ``[*B, T, 1]`` rewards); an episode ends
    where ``("next", done_key)`` is true, and the last step of each row is treated as an end.
    Every row must hold at least one done step.

    Args:
        gamma: the discount (a float or a 0-dim tensor, kept as the buffer ``gamma``).
        in_keys: the reward entries (default ``[("next", "reward")]``).
        out_keys: where the returns go (default: over the rewards).
        done_key: the done entry under ``"next"``.

    As TorchRL's, ``gamma < 1`` sums the rewards of every later step; TorchRL's ``gamma=0``
    gives zeros (its kernel is empty), tdrl gives the reward itself.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"next": {"reward": torch.ones(2, 4, 1),
        ...     "done": torch.tensor([[0, 1, 0, 1], [0, 0, 0, 1]]).bool()[..., None]}}, [2, 4])
        >>> out = Reward2GoTransform(gamma=1.0, out_keys=["return_to_go"]).inv(td)
        >>> out["return_to_go"][..., 0].tolist()
        [[2.0, 1.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0]]
    """

    gamma: torch.Tensor

    def __init__(
        self,
        gamma: float | torch.Tensor | None = 1.0,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        done_key: NestedKey | None = "done",
    ) -> None:
        keys = key_list(in_keys) if in_keys is not None else [("next", "reward")]
        outs = key_list(out_keys) if out_keys is not None else list(keys)
        if len(keys) != len(outs):
            raise ValueError(
                f"Reward2GoTransform.__init__: in_keys and out_keys differ in length (got "
                f"{keys} and {outs}; expected one output per reward). Pass as many keys."
            )
        if gamma is None or done_key is None:
            raise ValueError(
                f"Reward2GoTransform.__init__: gamma and done_key are required (got gamma="
                f"{gamma!r}, done_key={done_key!r}). Pass a float and a key."
            )
        super().__init__(in_keys=keys, in_keys_inv=keys, out_keys_inv=outs)
        self.done_key = done_key
        self.register_buffer("gamma", torch.as_tensor(gamma))

    def _attach(self, owner: Any, parent: Any) -> None:
        raise ValueError(
            "Reward2GoTransform: the transform cannot be part of an env (got a TransformedEnv; "
            "expected a replay buffer or a collector's postproc): the return-to-go needs the "
            "episode's future rewards. Pass it to ReplayBuffer(transform=...) or "
            "postproc=transform.inv."
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sampled data: returned as it is (the returns were written with the data)."""
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        done_key = (
            "next",
            *((self.done_key,) if isinstance(self.done_key, str) else self.done_key),
        )
        done = tensordict.get(done_key, None)
        if done is None:
            raise KeyNotFoundError(
                f"Reward2GoTransform.inv: the done entry {done_key!r} is missing (available "
                f"keys: {sorted(map(str, tensordict.keys(True, True)))}). Pass done_key=<the "
                "done leaf under 'next'>."
            )
        if done.ndim < 2 or not bool(done.any(-2).all()):
            raise RuntimeError(
                f"Reward2GoTransform.inv: a row of the data holds no episode end (got done of "
                f"shape {tuple(done.shape)}; expected a true {done_key!r} in every row along dim "
                "-2). Write whole episodes (more frames per batch than steps per episode)."
            )
        found = False
        gamma = float(self.gamma)
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            reward = tensordict.get(in_key, None)
            if reward is None:
                continue
            if reward.shape != done.shape:
                raise ValueError(
                    f"Reward2GoTransform.inv: {in_key!r} and {done_key!r} differ in shape (got "
                    f"{tuple(reward.shape)} and {tuple(done.shape)}; expected the same)."
                )
            tensordict.set(out_key, reward_to_go(reward, done, gamma))
            found = True
        if not found:
            raise KeyNotFoundError(
                f"Reward2GoTransform.inv: none of the reward entries {self.in_keys_inv} is in "
                f"the data (available keys: {sorted(map(str, tensordict.keys(True, True)))})."
            )
        return tensordict


class TargetReturn(Transform):
    """Conditions an env on a target return: set at reset, reduced by each step's reward.

    For each reward key the transform writes ``out_key`` (default: the reward's prefix plus
    ``"target_return"``), shaped as the reward: ``target_return`` after a reset where the
    reward's group resets (unchanged elsewhere), and at each step the root's value minus the
    step's reward (``mode="reduce"``) or the root's value (``mode="constant"``). It is the
    return-to-go a Decision Transformer reads at evaluation. As TorchRL's, the entry is
    declared in the observation and the state spec (it is read back from the root).

    Args:
        target_return: the return to reach (scaled as the rewards the model was trained on).
        mode: ``"reduce"`` or ``"constant"``.
        in_keys: the reward keys (default: every reward key of the env).
        out_keys: where the targets go.
        reset_key: the ``_reset`` key that restarts them (default: the env's only one).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=4), TargetReturn(10.0))
        >>> env.rollout(4)["next", "target_return"].flatten().tolist()
        [9.0, 8.0, 7.0, 6.0]
    """

    MODES = ("reduce", "constant")

    def __init__(
        self,
        target_return: float,
        mode: str = "reduce",
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        reset_key: NestedKey | None = None,
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(
                f"TargetReturn.__init__: unknown mode {mode!r} (expected one of "
                f"{list(self.MODES)}). Pass mode='reduce' or mode='constant'."
            )
        super().__init__()
        self.target_return = target_return
        self.mode = mode
        self._auto_in, self._auto_out = in_keys is None, out_keys is None
        self.in_keys, self.out_keys = key_list(in_keys), key_list(out_keys)
        self._given_reset_key = reset_key
        self._reset_key: NestedKey | None = reset_key
        self._shapes: list[tuple[torch.Size, torch.dtype]] = []

    @property
    def reset_key(self) -> NestedKey | None:
        """The ``_reset`` key that restarts the targets (resolved when attached to an env)."""
        return self._reset_key

    @reset_key.setter
    def reset_key(self, value: NestedKey | None) -> None:
        self._given_reset_key = self._reset_key = value

    def _bind(self, parent: EnvBase) -> None:
        if self._auto_in:
            self.in_keys = list(parent.reward_keys)
        if self._auto_out:
            self.out_keys = [with_prefix(key_prefix(k), "target_return") for k in self.in_keys]
        if len(set(self.out_keys)) != len(self.out_keys) or len(self.out_keys) != len(self.in_keys):
            raise ValueError(
                f"TargetReturn: one distinct out_key per reward is needed (got in_keys="
                f"{self.in_keys}, out_keys={self.out_keys}). Pass out_keys."
            )
        groups = [g.reset for g in parent.done_groups]
        if self._given_reset_key is None:
            if len(groups) > 1:
                raise ValueError(
                    f"TargetReturn: the env has several _reset keys (got {groups}; expected "
                    "one, or reset_key=...). Pass reset_key."
                )
            self._reset_key = groups[0]
        elif self._given_reset_key not in groups:
            raise KeyNotFoundError(
                f"TargetReturn.reset_key: {self._given_reset_key!r} is not a _reset key of the "
                f"env (available: {groups}). Pass one of them."
            )
        rewards = parent.full_reward_spec
        missing = [k for k in self.in_keys if k not in rewards.keys(True, True)]
        if missing:
            raise KeyNotFoundError(
                f"TargetReturn.in_keys: {missing} are not reward keys of the env below (available"
                f": {list(rewards.keys(True, True))}). Pass reward keys."
            )
        self._shapes = [(rewards[k].shape, rewards[k].dtype) for k in self.in_keys]

    def _spec(self, spec: Composite) -> Composite:
        for out_key, (shape, dtype) in zip(self.out_keys, self._shapes):
            spec[out_key] = Unbounded(shape=shape, dtype=dtype, device=spec.device)
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._spec(observation_spec)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._spec(state_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return reward_spec

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for out_key, (shape, dtype) in zip(self.out_keys, self._shapes):
            target = torch.full(
                shape, self.target_return, dtype=dtype, device=tensordict_out.device
            )
            new = self._where_reset(tensordict_in, out_key, target, reset_key=self._reset_key)
            tensordict_out.set(out_key, new)
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            target = tensordict.get(out_key, None)
            if target is None:
                raise self._missing_key(out_key, tensordict, "_step")
            reward = next_tensordict.get(in_key, None)
            if reward is None:
                raise self._missing_key(in_key, next_tensordict, "_step")
            if self.mode == "reduce":
                target = target - reward
            next_tensordict.set(out_key, target)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")
