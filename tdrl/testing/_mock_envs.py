"""Small deterministic envs used by tdrl's tests (and by users testing their own code)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core import EnvBase
from tdrl.specs import Bounded, Categorical, Composite, Unbounded

__all__ = ["CountingEnv", "FailingEnv", "MultiKeyEnv", "NestedCountingEnv"]


def _done_leaf(shape: Sequence[int], device: torch.device | None) -> Categorical:
    return Categorical(2, shape=tuple(shape), dtype=torch.bool, device=device)


class CountingEnv(EnvBase):
    """Counts steps: ``observation`` goes 0, 1, 2, ... and the episode terminates at ``max_steps``.

    The count lives in the data (the env is stateless), the action is ignored, the reward is 1.

    Args:
        batch_size: env batch size.
        max_steps: the step at which ``terminated`` becomes true.
        device: data device.

    Examples:
        >>> env = CountingEnv(batch_size=(2,), max_steps=3)
        >>> env.rollout(5)["next", "observation"][0, :, 0].tolist()
        [1.0, 2.0, 3.0]
    """

    def __init__(
        self,
        batch_size: Sequence[int] = (),
        max_steps: int = 5,
        device: torch.device | str | None = None,
        **kwargs: bool,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device, **kwargs)
        self.max_steps = max_steps
        b = tuple(self.batch_size)
        self.observation_spec = Unbounded(shape=(*b, 1), device=self.device)
        self.action_spec = Bounded(0.0, 1.0, shape=(*b, 1), device=self.device)
        self.reward_spec = Unbounded(shape=(*b, 1), device=self.device)
        self.full_done_spec = self.default_done_spec()
        self.seed: int | None = None

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        return TensorDict(
            {"observation": torch.zeros((*self.batch_size, 1), device=self.device)},
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs = tensordict.get("observation") + 1
        done = obs >= self.max_steps
        return TensorDict(
            {"observation": obs, "reward": torch.ones_like(obs), "terminated": done},
            batch_size=self.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        self.seed = seed


class FailingEnv(CountingEnv):
    """A CountingEnv whose ``_step`` raises ``RuntimeError`` once ``fail_after`` steps were taken.

    Examples:
        >>> env = FailingEnv(fail_after=1)
        >>> td = env.rand_step()
        >>> env.rand_step(env.step_mdp(td))
        Traceback (most recent call last):
        ...
        RuntimeError: FailingEnv._step: failing on purpose after 1 steps.
    """

    def __init__(self, batch_size: Sequence[int] = (), fail_after: int = 3, **kwargs: int) -> None:
        super().__init__(batch_size=batch_size, max_steps=10**9, **kwargs)  # type: ignore[arg-type]
        self.fail_after = fail_after
        self.steps_taken = 0

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.steps_taken >= self.fail_after:
            raise RuntimeError(
                f"FailingEnv._step: failing on purpose after {self.fail_after} steps."
            )
        self.steps_taken += 1
        return super()._step(tensordict)


class NestedCountingEnv(EnvBase):
    """Three done groups that finish at different steps (the seed-000 layout).

    Groups: the root (``observation``/``reward``/``done``/``terminated``, ends at
    ``max_steps``), ``"nested_1"`` with ``n_agents`` agents (per-agent entries of shape
    ``[*B, n_agents, 1]``; agent ``i`` ends at ``nested_max_steps[0] + i``) and ``"nested_2"``
    (ends at ``nested_max_steps[1]``). Each group counts the steps since its own last reset, has
    its own action and reward. The env is stateless: counts live in the observations.

    Examples:
        >>> env = NestedCountingEnv(batch_size=(2,))
        >>> env.reset_keys
        ['_reset', ('nested_1', '_reset'), ('nested_2', '_reset')]
    """

    def __init__(
        self,
        batch_size: Sequence[int] = (),
        max_steps: int = 6,
        nested_max_steps: tuple[int, int] = (2, 3),
        n_agents: int = 3,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        self.max_steps = max_steps
        self.nested_max_steps = nested_max_steps
        self.n_agents = n_agents
        b, dev = tuple(self.batch_size), self.device
        shapes = {(): (*b, 1), ("nested_1",): (*b, n_agents, 1), ("nested_2",): (*b, 1)}
        self._shapes = shapes
        obs, act, rew, done = (Composite(shape=b, device=dev) for _ in range(4))
        for prefix, shape in shapes.items():
            sub_shape = shape[:-1] if prefix == ("nested_1",) else b
            for spec in (obs, act, rew, done):
                if prefix and prefix not in spec:
                    spec[prefix] = Composite(shape=sub_shape, device=dev)
            obs[(*prefix, "observation")] = Unbounded(shape=shape, device=dev)
            act[(*prefix, "action")] = Bounded(0.0, 1.0, shape=shape, device=dev)
            rew[(*prefix, "reward")] = Unbounded(shape=shape, device=dev)
            done[(*prefix, "done")] = _done_leaf(shape, dev)
            done[(*prefix, "terminated")] = _done_leaf(shape, dev)
        self.full_observation_spec = obs
        self.full_action_spec = act
        self.full_reward_spec = rew
        self.full_done_spec = done
        limits = torch.arange(n_agents, dtype=torch.float32) + nested_max_steps[0]
        self._limits = {
            (): torch.tensor(float(max_steps)),
            ("nested_1",): limits.reshape(n_agents, 1),
            ("nested_2",): torch.tensor(float(nested_max_steps[1])),
        }

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        return self.full_observation_spec.zero()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.full_observation_spec.zero()
        for prefix in self._shapes:
            obs = tensordict.get((*prefix, "observation")) + 1
            out.set((*prefix, "observation"), obs)
            out.set((*prefix, "reward"), torch.ones_like(obs))
            out.set((*prefix, "terminated"), obs >= self._limits[prefix].to(obs.device))
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.seed = seed


class MultiKeyEnv(EnvBase):
    """A continuous and a discrete action key, two reward keys, one done group.

    ``observation`` accumulates the continuous action; ``("discrete", "observation")`` counts
    how often action 2 was picked. The rewards are ``-|observation|`` and the discrete choice.

    Examples:
        >>> env = MultiKeyEnv(batch_size=(2,))
        >>> env.action_keys, env.reward_keys
        (['action', ('discrete', 'action')], ['reward', ('discrete', 'reward')])
    """

    def __init__(
        self,
        batch_size: Sequence[int] = (),
        max_steps: int = 8,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        b, dev = tuple(self.batch_size), self.device
        self.max_steps = max_steps
        self.full_observation_spec = Composite(
            observation=Unbounded(shape=(*b, 2), device=dev),
            step=Unbounded(shape=(*b, 1), device=dev),
            discrete=Composite(observation=Unbounded(shape=(*b, 1), device=dev), shape=b),
            shape=b,
        )
        self.full_action_spec = Composite(
            action=Bounded(-1.0, 1.0, shape=(*b, 2), device=dev),
            discrete=Composite(action=Categorical(3, shape=(*b, 1), device=dev), shape=b),
            shape=b,
        )
        self.full_reward_spec = Composite(
            reward=Unbounded(shape=(*b, 1), device=dev),
            discrete=Composite(reward=Unbounded(shape=(*b, 1), device=dev), shape=b),
            shape=b,
        )
        self.full_done_spec = self.default_done_spec()

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        return self.full_observation_spec.zero()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs = tensordict.get("observation") + tensordict.get("action")
        choice = tensordict.get(("discrete", "action"))
        count = tensordict.get(("discrete", "observation")) + (choice == 2).float()
        step = tensordict.get("step") + 1
        out = self.full_observation_spec.zero()
        out.set("observation", obs)
        out.set("step", step)
        out.set(("discrete", "observation"), count)
        out.set("reward", -obs.abs().sum(-1, keepdim=True))
        out.set(("discrete", "reward"), choice.float())
        out.set("truncated", step >= self.max_steps)
        out.set("terminated", torch.zeros_like(step, dtype=torch.bool))
        out.set("done", step >= self.max_steps)
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.seed = seed
