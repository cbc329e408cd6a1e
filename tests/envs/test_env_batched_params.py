"""A stateless env in the style of TorchRL's pendulum tutorial: batched parameters given to reset.

The env has ``batch_size=()`` and ``batch_locked=False``; ``env.reset(env.gen_params(batch_size=
[10]))`` must hand the parameters to ``_reset`` and give batch-(10,) data, and the random steps and
rollouts that follow keep that batch.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.batched import SerialEnv
from tdrl.envs.core import EnvBase
from tdrl.specs import Bounded, Composite, Unbounded


class SwingEnv(EnvBase):
    """A damped pendulum whose gravity and time step come from ``"params"`` in the data."""

    batch_locked = False

    def __init__(self) -> None:
        super().__init__(batch_size=())
        self.observation_spec = Composite(
            th=Bounded(-math.pi, math.pi, shape=()),
            thdot=Bounded(-8.0, 8.0, shape=()),
            params=Composite(g=Unbounded(shape=()), dt=Unbounded(shape=()), shape=()),
            shape=(),
        )
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Bounded(-2.0, 2.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    @staticmethod
    def gen_params(g: float = 10.0, batch_size: list[int] | None = None) -> TensorDict:
        td = TensorDict({"params": TensorDict({"g": g, "dt": 0.05}, [])}, [])
        return td.expand(batch_size).contiguous() if batch_size else td

    def _reset(self, td):
        if td is None or td.is_empty():
            td = self.gen_params(batch_size=self.batch_size)
        th = torch.rand(td.shape) * 2 * math.pi - math.pi
        thdot = torch.rand(td.shape) * 2 - 1
        return TensorDict({"th": th, "thdot": thdot, "params": td["params"]}, td.shape)

    def _step(self, td):
        g, dt = td["params", "g"], td["params", "dt"]
        u = td["action"].squeeze(-1)
        thdot = td["thdot"] + (3 * g / 2 * td["th"].sin() + 3.0 * u) * dt
        th = td["th"] + thdot * dt
        reward = -(th**2).unsqueeze(-1)
        return TensorDict(
            {
                "th": th,
                "thdot": thdot,
                "params": td["params"],
                "reward": reward,
                "done": torch.zeros_like(reward, dtype=torch.bool),
            },
            td.shape,
        )

    def _set_seed(self, seed):
        pass


def test_reset_gets_the_batched_params_and_returns_their_batch():
    env = SwingEnv()
    params = env.gen_params(batch_size=[10])
    params["params", "g"] = torch.linspace(1.0, 10.0, 10)
    td = env.reset(params)
    assert td.batch_size == (10,)
    assert td["th"].shape == (10,) and td["done"].shape == (10, 1)
    assert torch.equal(td["params", "g"], torch.linspace(1.0, 10.0, 10))
    assert not td["done"].any() and not td["terminated"].any()


def test_unbatched_reset_still_uses_the_default_params():
    env = SwingEnv()
    td = env.reset()
    assert td.batch_size == () and td["params", "g"].item() == 10.0


def test_rand_step_and_rollout_keep_the_data_batch():
    env = SwingEnv()
    td = env.rand_step(env.reset(env.gen_params(batch_size=[10])))
    assert td["action"].shape == (10, 1) and td["next", "reward"].shape == (10, 1)
    start = env.reset(env.gen_params(batch_size=[10]))
    data = env.rollout(3, auto_reset=False, tensordict=start)
    assert data.batch_size == (10, 3)
    assert data["next", "done"].shape == (10, 3, 1)
    assert env.rollout(3).batch_size == (3,)


def test_a_wrong_action_shape_is_still_refused():
    env = SwingEnv()
    td = env.reset(env.gen_params(batch_size=[4])).set("action", torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"'action'.*got shape \(4, 2\).*expected shape \(4, 1\)"):
        env.step(td)


def test_a_batch_locked_env_refuses_data_of_another_batch():
    class Locked(SwingEnv):
        batch_locked = True

    with pytest.raises(RuntimeError, match=r"Locked.reset: .*got \(10,\); expected \(\)"):
        Locked().reset(SwingEnv.gen_params(batch_size=[10]))


def test_default_done_spec_is_done_and_terminated():
    assert sorted(SwingEnv().full_done_spec.keys()) == ["done", "terminated"]


def test_batched_env_passes_full_reset_inputs_to_its_workers():
    env = SerialEnv(2, SwingEnv)
    params = TensorDict(
        {"params": {"g": torch.tensor([3.0, 7.0]), "dt": torch.full((2,), 0.1)}}, [2]
    )
    td = env.reset(params)
    assert td["params", "g"].tolist() == [3.0, 7.0]
    assert td["params", "dt"].tolist() == pytest.approx([0.1, 0.1])
