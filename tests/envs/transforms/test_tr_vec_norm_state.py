"""VecNorm's state dict in TorchRL's layout, its loc/scale views and to_observation_norm."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import Compose, ObservationNorm, TransformedEnv, VecNorm
from tdrl.testing import NestedCountingEnv, TransformTestEnv

X = torch.tensor([[1.0, -2.0], [3.0, 2.0], [5.0, 0.0], [7.0, 4.0]])


def _fed(*keys, decay=1.0):
    t = VecNorm(list(keys), decay=decay)
    td = TensorDict({}, batch_size=[4])
    for key in keys:
        td.set(key, X.clone())
    t(td)
    return t


def test_state_dict_uses_torchrl_names_flat_and_nested():
    t = _fed("observation", ("agents", "obs"))
    state = t.state_dict()
    assert list(state) == ["_extra_state"]
    names = set(state["_extra_state"])
    assert names == {
        "observation_sum",
        "observation_ssq",
        "observation_count",
        "agents-<.>-obs_sum",
        "agents-<.>-obs_ssq",
        "agents-<.>-obs_count",
    }
    extra = state["_extra_state"]
    assert extra["observation_sum"].tolist() == [16.0, 4.0]
    assert extra["observation_ssq"].tolist() == [84.0, 24.0]
    assert extra["observation_count"].tolist() == [4.0]  # TorchRL's one-element count
    env = TransformedEnv(TransformTestEnv((2,)), VecNorm("observation", "n"))
    env.rollout(3)
    assert set(env.state_dict()["_extra_state"]) == {
        "observation_sum",
        "observation_ssq",
        "observation_count",
    }


def test_a_torchrl_state_loads():
    # what TorchRL 0.14's VecNorm saves: float32 sums, a one-element float32 count
    torchrl_state = {
        "_extra_state": {
            "x_sum": torch.tensor([16.0, 4.0]),
            "x_ssq": torch.tensor([84.0, 24.0]),
            "x_count": torch.tensor([4.0]),
        }
    }
    t = VecNorm("x", decay=1.0)
    t.load_state_dict(torchrl_state)
    assert t.loc["x"].tolist() == [4.0, 1.0]
    assert t.scale["x"].tolist() == pytest.approx([5**0.5, 5**0.5])
    out = t.freeze()(TensorDict(x=torch.tensor([[4.0 + 5**0.5, 1.0]]), batch_size=[1]))
    assert out["x"].flatten().tolist() == pytest.approx([1.0, 0.0])


def test_round_trip_keeps_per_agent_counts():
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        VecNorm(("nested_1", "observation"), ("nested_1", "n"), decay=1.0),
    )
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 2] = True
    td[("nested_1", "_reset")] = mask
    env.reset(td)
    state = env.state_dict()
    key = "nested_1-<.>-observation_count"
    # a reset counts every row (TorchRL): one count for all, saved as TorchRL's one element
    assert state["_extra_state"][key].tolist() == [6.0]
    state["_extra_state"][key] = torch.tensor([[4.0], [4.0], [5.0]], dtype=torch.float64)
    env.load_state_dict(state)
    state = env.state_dict()
    count = state["_extra_state"][key]
    assert count.flatten().tolist() == [4.0, 4.0, 5.0]  # counts that differ: kept per feature
    other = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        VecNorm(("nested_1", "observation"), ("nested_1", "n"), decay=1.0),
    )
    other.load_state_dict(state)
    for a, b in zip(other.state_dict()["_extra_state"].values(), state["_extra_state"].values()):
        assert torch.equal(a, b)


def test_loading_bad_states_raises():
    t = _fed("x")
    with pytest.raises(KeyError, match=r"statistics of 'x' are missing"):
        t.load_state_dict({"_extra_state": {"x_sum": torch.zeros(2)}})
    with pytest.raises(KeyError, match=r"unknown statistics \(got \['y_sum'\]"):
        t.load_state_dict(
            {
                "_extra_state": {
                    "x_sum": torch.zeros(2),
                    "x_ssq": torch.zeros(2),
                    "x_count": torch.ones(1),
                    "y_sum": torch.zeros(2),
                }
            }
        )
    with pytest.raises(ValueError, match=r"statistics of 'x' do not have the expected shape"):
        t.load_state_dict(
            {
                "_extra_state": {
                    "x_sum": torch.zeros(3),
                    "x_ssq": torch.zeros(3),
                    "x_count": torch.ones(3),
                }
            }
        )
    with pytest.raises(RuntimeError, match=r"Missing key.*_extra_state"):
        t.load_state_dict({})


def test_loc_and_scale_are_torchrl_views():
    t = _fed("x", ("a", "y"), decay=1.0)
    loc, scale = t.loc, t.scale
    assert isinstance(loc, TensorDict) and set(loc.keys(True, True)) == {"x", ("a", "y")}
    assert loc["x"].tolist() == [4.0, 1.0] and loc["x"].dtype == torch.float32
    assert scale["a", "y"].tolist() == pytest.approx([5**0.5, 5**0.5])
    assert t.standard_normal is True
    tiny = _fed("x")
    tiny.load_state_dict(
        {"_extra_state": {"x_sum": torch.ones(2), "x_ssq": torch.ones(2), "x_count": torch.ones(1)}}
    )
    # TorchRL: std = sqrt(max(var, eps)), here var = 0
    assert tiny.scale["x"].tolist() == pytest.approx([1e-2, 1e-2])
    with pytest.raises(RuntimeError, match=r"VecNorm.loc: no statistics for 'x' yet"):
        _ = VecNorm("x").loc


def test_to_observation_norm_and_denorm():
    t = _fed("x", decay=1.0)
    fixed = t.to_observation_norm()
    assert isinstance(fixed, ObservationNorm) and bool(fixed.standard_normal)
    td = TensorDict(x=torch.tensor([[4.0, 1.0 + 5**0.5]]), batch_size=[1])
    assert fixed(td.clone())["x"].flatten().tolist() == pytest.approx([0.0, 1.0])
    both = _fed("x", "z").to_observation_norm()
    assert isinstance(both, Compose) and [n.in_keys for n in both] == [["x"], ["z"]]
    t = VecNorm("x", "n", decay=1.0)
    out = t(TensorDict(x=X.clone(), batch_size=[4]))
    normed = out.exclude("x")
    back = t.denorm(normed)
    torch.testing.assert_close(back["x"], X)
    assert "x" not in normed.keys()  # denorm works on a copy
