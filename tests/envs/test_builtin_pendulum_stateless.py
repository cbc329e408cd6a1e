"""PendulumEnv (TorchRL's stateless tutorial env): dynamics by hand, batched params, tutorial use."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import (
    CatTensors,
    PendulumEnv,
    PendulumV1Env,
    TransformedEnv,
    UnsqueezeTransform,
    check_env_specs,
)


def _state(th: float, thdot: float, action: float, g: float = 10.0) -> TensorDict:
    td = PendulumEnv.gen_params(g=g)
    td["th"] = torch.tensor(th)
    td["thdot"] = torch.tensor(thdot)
    td["action"] = torch.tensor([action])
    return td


def _wrap(x: float) -> float:
    return (x + math.pi) % (2 * math.pi) - math.pi


def test_one_step_matches_the_formula_by_hand():
    env = PendulumEnv(seed=0)
    th, thdot, u, g, dt = 0.5, 1.0, 1.5, 9.81, 0.05
    nxt = env.step(_state(th, thdot, u, g))["next"]
    new_thdot = thdot + (3 * g / 2 * math.sin(th) + 3 * u) * dt
    assert nxt["thdot"].item() == pytest.approx(new_thdot, rel=1e-6)
    assert nxt["th"].item() == pytest.approx(th + new_thdot * dt, rel=1e-6)
    cost = th**2 + 0.1 * thdot**2 + 0.001 * u**2
    assert nxt["reward"].shape == (1,)
    assert nxt["reward"].item() == pytest.approx(-cost, rel=1e-6)
    assert not nxt["done"].item() and not nxt["terminated"].item()
    assert nxt["params", "g"].item() == pytest.approx(g)


def test_torque_and_speed_are_clipped_and_the_angle_wrapped():
    env = PendulumEnv(seed=0)
    th, thdot = 3.1, 7.9
    nxt = env.step(_state(th, thdot, 5.0))["next"]
    # the torque is clipped to 2 and the new speed to 8, then the angle passes pi and wraps
    assert nxt["thdot"].item() == pytest.approx(8.0)
    assert nxt["th"].item() == pytest.approx(_wrap(th + 8.0 * 0.05), abs=1e-5)
    assert nxt["th"].item() < 0
    cost = _wrap(th) ** 2 + 0.1 * thdot**2 + 0.001 * 2.0**2
    assert nxt["reward"].item() == pytest.approx(-cost, rel=1e-5)


def test_each_member_steps_with_its_own_params():
    env = PendulumEnv(seed=0)
    td = env.reset(env.gen_params(batch_size=[3]))
    td["params", "g"] = torch.tensor([0.0, 10.0, 20.0])
    td["th"] = torch.full((3,), 1.0)
    td["thdot"] = torch.zeros(3)
    td["action"] = torch.zeros(3, 1)
    nxt = env.step(td)["next"]
    expected = [g * 1.5 * math.sin(1.0) * 0.05 for g in (0.0, 10.0, 20.0)]
    assert nxt["thdot"].tolist() == pytest.approx(expected, rel=1e-5)
    assert nxt["params", "g"].tolist() == [0.0, 10.0, 20.0]


def test_tutorial_usage_batched_reset_rollout_and_specs():
    env = PendulumEnv(seed=0)
    assert env.batch_size == () and env.batch_locked is False
    check_env_specs(env)
    td = env.reset(env.gen_params(batch_size=[10]))
    assert td.batch_size == (10,) and td["th"].shape == (10,)
    assert td["params", "max_torque"].shape == (10,)
    assert (td["th"].abs() <= math.pi).all() and (td["thdot"].abs() <= 1.0).all()
    out = env.rollout(3, auto_reset=False, tensordict=td)
    assert out.batch_size == (10, 3)
    assert out["action"].shape == out["next", "reward"].shape == (10, 3, 1)
    assert (out["next", "th"].abs() <= math.pi).all()
    assert env.rollout(4).batch_size == (4,)
    assert sorted(env.full_done_spec.keys()) == ["done", "terminated"]
    assert sorted(env.observation_spec.keys()) == ["params", "th", "thdot"]
    assert sorted(env.state_spec.keys()) == ["params", "th", "thdot"]


def test_tutorial_transforms_and_backprop_through_the_simulator():
    env = TransformedEnv(
        PendulumEnv(seed=0),
        UnsqueezeTransform(dim=-1, in_keys=["th", "thdot"], in_keys_inv=["th", "thdot"]),
    )
    env.append_transform(
        CatTensors(in_keys=["th", "thdot"], dim=-1, out_key="observation", del_keys=False)
    )
    policy = TensorDictModule(nn.Linear(2, 1), in_keys=["observation"], out_keys=["action"])
    init = env.reset(env.gen_params(batch_size=[4]))
    rollout = env.rollout(5, policy, tensordict=init, auto_reset=False)
    assert rollout.batch_size == (4, 5)
    rollout["next", "reward"].mean().backward()
    assert policy.module.weight.grad is not None and policy.module.weight.grad.abs().sum() > 0


def test_seeding_and_reset_ranges():
    a = PendulumEnv(seed=3).reset(PendulumEnv.gen_params(batch_size=[5]))
    b = PendulumEnv(seed=3).reset(PendulumEnv.gen_params(batch_size=[5]))
    assert torch.equal(a["th"], b["th"]) and torch.equal(a["thdot"], b["thdot"])
    torch.manual_seed(1)
    c = PendulumEnv().reset()
    torch.manual_seed(1)
    d = PendulumEnv().reset()
    assert torch.equal(c["th"], d["th"])
    big = PendulumEnv(seed=0).reset(PendulumEnv.gen_params(batch_size=[4000]))
    assert big["th"].min() >= -math.pi and big["th"].max() < math.pi
    assert big["th"].min() < -3.0 and big["th"].max() > 3.0
    assert big["thdot"].min() >= -1.0 and big["thdot"].max() < 1.0


def test_signature_positions_and_gen_params():
    params = PendulumEnv.gen_params(9.0, [2], "cpu")
    assert params.batch_size == (2,) and params.device == torch.device("cpu")
    assert params["params", "g"].tolist() == [9.0, 9.0]
    assert {k: params["params", k][0].item() for k in ("max_speed", "max_torque", "m", "l")} == {
        "max_speed": 8.0,
        "max_torque": 2.0,
        "m": 1.0,
        "l": 1.0,
    }
    assert params["params", "dt"][0].item() == pytest.approx(0.05)
    assert params["params", "g"].dtype == torch.float32
    custom = PendulumEnv.gen_params()
    custom["params", "max_torque"] = torch.tensor(1.0)
    custom["params", "max_speed"] = torch.tensor(4.0)
    env = PendulumEnv(custom, 0, "cpu")
    assert env.device == torch.device("cpu")
    assert env.action_spec.high.item() == 1.0 and env.action_spec.low.item() == -1.0
    assert env.observation_spec["thdot"].high.item() == 4.0


def test_reset_without_params_uses_the_default_physics_as_torchrl():
    env = PendulumEnv(PendulumEnv.gen_params(g=5.0), seed=0)
    assert env.reset()["params", "g"].item() == 10.0
    assert env.reset(PendulumEnv.gen_params(g=5.0))["params", "g"].item() == 5.0


def test_td_params_without_params_entry_is_refused():
    with pytest.raises(KeyError, match="td_params has no 'params'"):
        PendulumEnv(TensorDict(g=torch.tensor(10.0)))


def test_pendulum_v1_env_is_the_stateful_one():
    assert "observation" in PendulumV1Env(batch_size=(2,)).reset().keys()
    assert "observation" not in PendulumEnv(seed=0).reset().keys()
