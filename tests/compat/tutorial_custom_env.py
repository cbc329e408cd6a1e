"""A stateless custom env with batched parameters, the pattern of TorchRL's pendulum tutorial.

The env subclasses ``EnvBase`` with ``batch_size=[]`` and ``batch_locked = False``; its physical
parameters live in the tensordict under ``"params"``. ``env.reset(env.gen_params(batch_size=[10]))``
therefore gives a batch of 10 pendulums from an unbatched env. ``_set_seed`` returns nothing, as in
the tutorial. A custom ``Transform`` (sine/cosine of the angle) and ``UnsqueezeTransform`` /
``CatTensors`` build the observation, and a small policy is trained by back-propagating through
the differentiable simulator.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.data import Bounded, Composite, Unbounded
from tdrl.envs import (
    CatTensors,
    EnvBase,
    Transform,
    TransformedEnv,
    UnsqueezeTransform,
    check_env_specs,
)

MAX_SPEED = 8.0
MAX_TORQUE = 2.0


def wrap_angle(x: torch.Tensor) -> torch.Tensor:
    """Map an angle to ``[-pi, pi)``."""
    return ((x + math.pi) % (2 * math.pi)) - math.pi


def gen_params(g: float = 10.0, batch_size: list[int] | None = None) -> TensorDictBase:
    """Physical parameters of the pendulum, optionally repeated over a batch."""
    if batch_size is None:
        batch_size = []
    params = TensorDict(
        {
            "params": TensorDict(
                {
                    "max_speed": MAX_SPEED,
                    "max_torque": MAX_TORQUE,
                    "dt": 0.05,
                    "g": g,
                    "m": 1.0,
                    "l": 1.0,
                },
                [],
            )
        },
        [],
    )
    if batch_size:
        params = params.expand(batch_size).contiguous()
    return params


def spec_from_td(td: TensorDictBase) -> Composite:
    """An ``Unbounded`` leaf spec for every entry of ``td`` (nested tensordicts become Composites)."""
    return Composite(
        {
            key: spec_from_td(value)
            if isinstance(value, TensorDictBase)
            else Unbounded(dtype=value.dtype, device=value.device, shape=value.shape)
            for key, value in td.items()
        },
        shape=td.shape,
    )


def _step(tensordict: TensorDictBase) -> TensorDictBase:
    th, thdot = tensordict["th"], tensordict["thdot"]
    g = tensordict["params", "g"]
    m = tensordict["params", "m"]
    length = tensordict["params", "l"]
    dt = tensordict["params", "dt"]
    torque = tensordict["action"].squeeze(-1)
    torque = torque.clamp(-tensordict["params", "max_torque"], tensordict["params", "max_torque"])
    cost = wrap_angle(th) ** 2 + 0.1 * thdot**2 + 0.001 * torque**2
    accel = 3 * g / (2 * length) * th.sin() + 3.0 / (m * length**2) * torque
    new_thdot = (thdot + accel * dt).clamp(
        -tensordict["params", "max_speed"], tensordict["params", "max_speed"]
    )
    new_th = th + new_thdot * dt
    reward = -cost.view(*tensordict.shape, 1)
    done = torch.zeros_like(reward, dtype=torch.bool)
    return TensorDict(
        {
            "th": new_th,
            "thdot": new_thdot,
            "params": tensordict["params"],
            "reward": reward,
            "done": done,
        },
        tensordict.shape,
    )


def _reset(self: EnvBase, tensordict: TensorDictBase | None) -> TensorDictBase:
    if tensordict is None or tensordict.is_empty():
        tensordict = self.gen_params(batch_size=self.batch_size)
    high_th = torch.full(tensordict.shape, math.pi)
    high_thdot = torch.full(tensordict.shape, 1.0)
    th = (torch.rand(tensordict.shape, generator=self.rng) * 2 - 1) * high_th
    thdot = (torch.rand(tensordict.shape, generator=self.rng) * 2 - 1) * high_thdot
    return TensorDict(
        {"th": th, "thdot": thdot, "params": tensordict["params"]}, batch_size=tensordict.shape
    )


def _make_spec(self: EnvBase, td_params: TensorDictBase) -> None:
    self.observation_spec = Composite(
        th=Bounded(low=-math.pi, high=math.pi, shape=(), dtype=torch.float32),
        thdot=Bounded(low=-MAX_SPEED, high=MAX_SPEED, shape=(), dtype=torch.float32),
        params=spec_from_td(td_params["params"]),
        shape=(),
    )
    self.state_spec = self.observation_spec.clone()
    self.action_spec = Bounded(low=-MAX_TORQUE, high=MAX_TORQUE, shape=(1,), dtype=torch.float32)
    self.reward_spec = Unbounded(shape=(*td_params.shape, 1))


def _set_seed(self: EnvBase, seed: int | None) -> None:
    self.rng = torch.Generator().manual_seed(seed)


class PendulumEnv(EnvBase):
    """Unbatched pendulum whose parameters may be batched through ``reset(params)``."""

    batch_locked = False

    def __init__(self, td_params: TensorDictBase | None = None, seed: int | None = None) -> None:
        if td_params is None:
            td_params = self.gen_params()
        super().__init__(device="cpu", batch_size=[])
        self._make_spec(td_params)
        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        self.set_seed(seed)

    gen_params = staticmethod(gen_params)
    _make_spec = _make_spec
    _reset = _reset
    _step = staticmethod(_step)
    _set_seed = _set_seed


class SinTransform(Transform):
    """Adds the sine of an entry."""

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.sin()

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec[self.out_keys[0]] = Bounded(
            low=-1, high=1, shape=observation_spec[self.in_keys[0]].shape, dtype=torch.float32
        )
        return observation_spec


class CosTransform(SinTransform):
    """Adds the cosine of an entry."""

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.cos()


def make_env(seed: int = 0) -> TransformedEnv:
    """The pendulum with a ``[cos, sin, thdot]`` observation."""
    env = TransformedEnv(
        PendulumEnv(seed=seed),
        UnsqueezeTransform(dim=-1, in_keys=["th", "thdot"], in_keys_inv=["th", "thdot"]),
    )
    env.append_transform(SinTransform(in_keys=["th"], out_keys=["sin"]))
    env.append_transform(CosTransform(in_keys=["th"], out_keys=["cos"]))
    env.append_transform(
        CatTensors(in_keys=["cos", "sin", "thdot"], dim=-1, out_key="observation", del_keys=False)
    )
    return env


def main(budget: int = 20) -> dict[str, Any]:
    """Check the env, reset it with batched params and train a policy through the simulator.

    Args:
        budget: number of optimisation steps.

    Returns:
        The batched reset, a batched rollout and the per-step training returns.
    """
    torch.manual_seed(0)
    base = PendulumEnv(seed=0)
    check_env_specs(base)
    batched_reset = base.reset(base.gen_params(batch_size=[10]))
    batched_rollout = base.rollout(3, auto_reset=False, tensordict=batched_reset)

    env = make_env(seed=0)
    check_env_specs(env)
    policy = TensorDictModule(
        nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.LazyLinear(64), nn.Tanh(), nn.LazyLinear(1)),
        in_keys=["observation"],
        out_keys=["action"],
    )
    policy(env.reset())
    optim = torch.optim.Adam(policy.parameters(), lr=2e-3)
    batch_size = 10
    returns = []
    for _ in range(budget):
        init_td = env.reset(env.gen_params(batch_size=[batch_size]))
        rollout = env.rollout(20, policy, tensordict=init_td, auto_reset=False)
        traj_return = rollout["next", "reward"].mean()
        (-traj_return).backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        returns.append(traj_return.item())
    return {
        "batched_reset": batched_reset,
        "batched_rollout": batched_rollout,
        "training_rollout": rollout,
        "returns": returns,
    }


if __name__ == "__main__":
    main()
