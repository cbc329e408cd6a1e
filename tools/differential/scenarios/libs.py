"""Gymnasium envs through ``GymEnv``/``GymWrapper``, and the batched envs, seeded.

``ParallelEnv`` shares ``SerialEnv``'s semantics; it has no scenario because starting worker
processes takes seconds on the 2-core CI machine (the test must stay under a minute).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule

from ..registry import capture, scenario
from ._common import count_env, det_policy


class FirstAction(torch.nn.Module):
    """Always the action ``spec.zero()`` would give, built from the observation's batch."""

    def __init__(self, action: torch.Tensor) -> None:
        super().__init__()
        self.action = action

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action.expand(*obs.shape[:-1], *self.action.shape).clone()


def _gym(lib: Any, name: str, steps: int = 6, seed: int = 0, **kwargs: Any) -> dict[str, Any]:
    env = lib.gym.GymEnv(name, **kwargs)
    out: dict[str, Any] = {
        "batch_size": list(env.batch_size),
        "observation_spec": env.observation_spec,
        "action_spec": env.action_spec,
        "reward_spec": env.reward_spec,
        "full_done_spec": env.full_done_spec,
    }
    env.set_seed(seed)
    action = env.action_spec.zero()
    action = action.reshape(-1, *action.shape[len(env.batch_size) :])[0]  # one env's action
    if action.dtype == torch.int64 and action.shape[-1:] == (2,):  # one-hot: push right
        action = torch.zeros_like(action)
        action[..., 1] = 1
    policy = TensorDictModule(FirstAction(action), in_keys=["observation"], out_keys=["action"])
    out["reset"] = env.reset()
    env.set_seed(seed)
    out["rollout"] = capture(lambda: env.rollout(steps, policy, break_when_any_done=False))
    env.close()
    return out


@scenario("gym/CartPole-v1/default")
def _(lib: Any) -> Any:
    return _gym(lib, "CartPole-v1")


@scenario("gym/CartPole-v1/categorical_action_encoding")
def _(lib: Any) -> Any:
    return _gym(lib, "CartPole-v1", categorical_action_encoding=True)


@scenario("gym/CartPole-v1/frame_skip=2")
def _(lib: Any) -> Any:
    return _gym(lib, "CartPole-v1", frame_skip=2)


@scenario("gym/Pendulum-v1/default")
def _(lib: Any) -> Any:
    return _gym(lib, "Pendulum-v1", steps=4)


@scenario("gym/Pendulum-v1/from_pixels=False_device")
def _(lib: Any) -> Any:
    return _gym(lib, "Pendulum-v1", steps=3, device="cpu")


@scenario("gym/CartPole-v1/num_envs=2")
def _(lib: Any) -> Any:
    """TorchRL builds gymnasium's async vector env, tdrl the sync one (README: same data)."""
    return _gym(lib, "CartPole-v1", steps=4, num_envs=2)


@scenario("gym/CartPole-v1/truncation")
def _(lib: Any) -> Any:
    """A TimeLimit of 3 steps: what truncation writes."""
    import gymnasium

    env = lib.gym.GymWrapper(gymnasium.make("CartPole-v1", max_episode_steps=3))
    env.set_seed(0)
    action = torch.zeros(2, dtype=torch.int64)
    action[0] = 1
    policy = TensorDictModule(FirstAction(action), in_keys=["observation"], out_keys=["action"])
    return env.rollout(5, policy, break_when_any_done=False)


@scenario("gym/MountainCarContinuous-v0/specs")
def _(lib: Any) -> Any:
    env = lib.gym.GymEnv("MountainCarContinuous-v0")
    return {"action_spec": env.action_spec, "observation_spec": env.observation_spec}


@scenario("batched/SerialEnv/rollout")
def _(lib: Any) -> Any:
    env = lib.envs.SerialEnv(2, lambda: count_env(lib, (), horizon=3))
    out = {"batch_size": list(env.batch_size), "specs": env.full_done_spec}
    out["rollout"] = env.rollout(5, det_policy(), break_when_any_done=False)
    env.close()
    return out


@scenario("batched/SerialEnv/partial_reset")
def _(lib: Any) -> Any:
    env = lib.envs.SerialEnv(2, lambda: count_env(lib, (), horizon=5))
    td = env.reset()
    for _ in range(2):
        td = lib.envs_utils.step_mdp(env.step(det_policy()(td)))
    td["_reset"] = torch.tensor([[True], [False]])
    out = env.reset(td)
    env.close()
    return out


@scenario("gym/Pendulum-v1/set_seed_return")
def _(lib: Any) -> Any:
    env = lib.gym.GymEnv("Pendulum-v1")
    try:
        return {"first": env.set_seed(0), "second": env.set_seed(123)}
    finally:
        env.close()


@scenario("batched/SerialEnv/gym_seeding")
def _(lib: Any) -> Any:
    """Seeding a batch of gym envs: the seed each sub-env gets shows in the reset values."""
    env = lib.envs.SerialEnv(2, lambda: lib.gym.GymEnv("Pendulum-v1"))
    try:
        next_seed = env.set_seed(7)
        return {"next_seed": next_seed, "reset": env.reset()}
    finally:
        env.close()


@scenario("gym/Pendulum-v1/StepCounter_truncation")
def _(lib: Any) -> Any:
    env = lib.envs.TransformedEnv(lib.gym.GymEnv("Pendulum-v1"), lib.envs.StepCounter(max_steps=3))
    env.set_seed(0)
    zero = torch.zeros(1)
    policy = TensorDictModule(FirstAction(zero), in_keys=["observation"], out_keys=["action"])
    try:
        return env.rollout(5, policy, break_when_any_done=False)
    finally:
        env.close()
