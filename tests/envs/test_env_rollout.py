"""rollout's policy handling: merged outputs and auto_cast_to_device (TorchRL's semantics)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs.builtin import PendulumV1Env
from tdrl.envs.core import _rollout as rollout_module
from tdrl.envs.core._rollout import cast_plan, policy_device
from tdrl.envs.libs import GymEnv
from tdrl.testing import CountingEnv

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 1)


def _zero_action(td):
    return TensorDict(action=torch.zeros(*td.batch_size, 1), batch_size=td.batch_size)


@pytest.mark.parametrize("steps", [5, 80])  # 80: long enough for the row path
def test_a_policy_returning_only_its_outputs_updates_its_input(steps):
    # TorchRL: rollout runs tensordict.update(policy(tensordict))
    env = CountingEnv(batch_size=(2,), max_steps=100)
    td = env.rollout(steps, _zero_action)
    assert {"observation", "done", "action"} <= set(td.keys())
    ref = CountingEnv(batch_size=(2,), max_steps=100).rollout(
        steps, lambda t: t.set("action", torch.zeros(2, 1))
    )
    assert set(td.keys(True, True)) == set(ref.keys(True, True))
    for key in ref.keys(True, True):
        assert torch.equal(td[key], ref[key]), key


def test_a_policy_returning_something_else_raises():
    with pytest.raises(TypeError, match=r"CountingEnv.rollout: the policy returned NoneType"):
        CountingEnv().rollout(2, lambda td: None)


@pytest.mark.parametrize("device", [None, "cpu"])
def test_auto_cast_on_one_device_gives_the_same_rollout(device):
    policy = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    runs = []
    for cast in (False, True):
        env = PendulumV1Env(batch_size=(2,), device=device)
        env.set_seed(0)
        torch.manual_seed(0)
        runs.append(env.rollout(40, policy, auto_cast_to_device=cast, break_when_any_done=False))
    plain, cast = runs
    assert cast.device == plain.device
    assert set(cast.keys(True, True)) == set(plain.keys(True, True))
    for key in plain.keys(True, True):
        torch.testing.assert_close(cast[key], plain[key], rtol=0, atol=0, msg=str(key))


class _Param:
    def __init__(self, device):
        self.device = device


class _FarPolicy:
    """Reports parameters on another device (a CPU-only stand-in for a CUDA policy)."""

    def __init__(self, device):
        self.device = device
        self.seen: list[TensorDictBase] = []

    def parameters(self):
        return iter([_Param(self.device)])

    def __call__(self, td):
        self.seen.append(td)
        return td.set("action", torch.zeros(*td.batch_size, 1))


def test_the_device_of_a_policy_is_its_first_parameters():
    assert policy_device(nn.Linear(1, 1)) == CPU
    assert policy_device(_FarPolicy(CUDA)) == CUDA
    assert policy_device(nn.Sequential()) is None  # no parameters
    assert policy_device(lambda td: td) is None  # not a module


def test_cast_plan_decisions():
    assert cast_plan(CPU, CPU) is None and cast_plan(None, None) is None
    assert cast_plan(CUDA, CUDA) is None
    assert cast_plan(CPU, None) is None  # an env without device holds cpu tensors
    assert cast_plan(CUDA, CPU) == (CUDA, CPU)
    assert cast_plan(CUDA, None) == (CUDA, None)
    assert cast_plan(None, CPU) == (None, CPU)  # TorchRL: clear the device, then back


def test_auto_cast_moves_to_the_policy_device_and_back(monkeypatch):
    moves: list[torch.device | None] = []

    def fake_move(td, device):  # records where the data goes (no CUDA on this machine)
        moves.append(device)
        return td

    monkeypatch.setattr(rollout_module, "_move", fake_move)
    env = CountingEnv(device="cpu")
    policy = _FarPolicy(CUDA)
    act = rollout_module.rollout_policy(env, policy, auto_cast_to_device=True)
    out = act(env.reset())
    assert moves == [CUDA, CPU]  # to the policy's device, then back to the env's
    assert isinstance(out, TensorDictBase) and "action" in out.keys() and policy.seen
    moves.clear()
    rollout_module.rollout_policy(env, _FarPolicy(CUDA), auto_cast_to_device=False)(env.reset())
    rollout_module.rollout_policy(env, _FarPolicy(CPU), auto_cast_to_device=True)(env.reset())
    assert moves == []  # nothing moves without the flag, nor on one device


def test_move_clears_or_moves_the_device():
    td = TensorDict(a=torch.zeros(1), device="cpu")
    assert rollout_module._move(td, CPU) is td
    assert rollout_module._move(td, None) is td and td.device is None


class _ResetCountingEnv(CountingEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.resets = 0

    def _reset(self, tensordict):
        self.resets += 1
        return super()._reset(tensordict)


def test_the_last_step_of_a_nonstop_rollout_is_not_reset_nor_called_back():
    # TorchRL: the last step is a plain step (no reset after it) and the callback runs after
    # every step but the last
    env = _ResetCountingEnv(batch_size=(2,), max_steps=3)
    seen = []
    td = env.rollout(6, callback=lambda e, t: seen.append(t), break_when_any_done=False)
    assert td["next", "done"][:, -1].all()  # the episode ends at the last step
    assert env.resets == 2  # the first reset, the one after step 3; none after step 6
    assert len(seen) == 5


class _ResetCountingGym(gymnasium.Env):
    """Episodes of 3 steps; counts its resets (in the class: GymEnv builds the env)."""

    observation_space = gymnasium.spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        type(self).resets += 1
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, dtype=np.float32), 1.0, self.t >= 3, False, {}


gymnasium.register("tdrl-test/ResetCounting-v0", entry_point=_ResetCountingGym)


def test_the_row_path_does_not_reset_after_the_last_step_either():
    env = GymEnv("tdrl-test/ResetCounting-v0")
    _ResetCountingGym.resets = 0
    seen = []
    td = env.rollout(42, callback=lambda e, t: seen.append(t), break_when_any_done=False)
    assert td["next", "done"][-1].all()  # step 42 ends an episode
    assert _ResetCountingGym.resets == 14  # the first, then after steps 3, 6, ..., 39
    assert len(seen) == 41


def test_break_when_all_done_runs_until_every_member_was_done_as_torchrl():
    from tdrl.testing import TransformTestEnv

    env = TransformTestEnv((2,), max_steps=2)  # member 0 ends at step 2, member 1 at step 3
    seen = []
    td = env.rollout(
        6,
        env.rand_action,
        callback=lambda e, t: seen.append(t),
        break_when_any_done=False,
        break_when_all_done=True,
    )
    assert td.batch_size == (2, 3)
    # nothing is reset; member 0 repeats its last step once done
    assert td["next", "observation"][..., 0].tolist() == [[1.5, 2.5, 2.5], [1.5, 2.5, 3.5]]
    assert td["next", "done"][..., 0].tolist() == [[False, True, True], [False, False, True]]
    assert td["observation"][..., 0].tolist() == [[0.5, 1.5, 1.5], [0.5, 1.5, 2.5]]
    assert len(seen) == 2
    # break_when_all_done alone implies break_when_any_done=False (TorchRL)
    assert env.rollout(6, break_when_all_done=True).batch_size == (2, 3)
    with pytest.raises(TypeError, match="both True"):
        env.rollout(6, break_when_any_done=True, break_when_all_done=True)
