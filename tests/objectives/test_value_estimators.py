"""Value estimator modules: key routing, value network calls, gradients and errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
    ValueEstimators,
    ValueKeys,
)
from tdrl.objectives.value import _reference as ref

OBS = 4


def make_td(batch=(2, 3), steps=7, dtype=torch.float32, seed=0, values=True, agents=None):
    """A rollout tensordict ``[*batch, steps]`` with mid-trajectory terminations/truncations.

    With ``agents=n`` the reward and values live under ``"agents"`` with an extra agent dim while
    done/terminated stay at the root (one flag for the whole team).
    """
    gen = torch.Generator().manual_seed(seed)
    shape = (*batch, steps)
    feat = (1,) if agents is None else (agents, 1)
    terminated = torch.rand(*shape, 1, generator=gen) < 0.1
    done = terminated | (torch.rand(*shape, 1, generator=gen) < 0.1)
    td = TensorDict(
        {
            "observation": torch.randn(*shape, OBS, generator=gen, dtype=dtype),
            "next": {
                "observation": torch.randn(*shape, OBS, generator=gen, dtype=dtype),
                "done": done,
                "terminated": terminated,
            },
        },
        batch_size=shape,
    )
    prefix = () if agents is None else ("agents",)
    td.set(("next", *prefix, "reward"), torch.randn(*shape, *feat, generator=gen, dtype=dtype))
    if values:
        td.set((*prefix, "state_value"), torch.randn(*shape, *feat, generator=gen, dtype=dtype))
        td.set(
            ("next", *prefix, "state_value"),
            torch.randn(*shape, *feat, generator=gen, dtype=dtype),
        )
    return td


def expected_loop(kind, td, gamma, lmbda, prefix=()):
    """The reference loops on the tensordict's tensors (done broadcast to the reward)."""
    reward = td.get(("next", *prefix, "reward"))
    value = td.get((*prefix, "state_value"))
    next_value = td.get(("next", *prefix, "state_value"))
    done = td.get(("next", "done"))
    terminated = td.get(("next", "terminated"))
    if done.ndim < reward.ndim:
        done = done.unsqueeze(-2).expand(reward.shape)
        terminated = terminated.unsqueeze(-2).expand(reward.shape)
    dim = td.ndim - 1
    if kind == "gae":
        return ref.generalized_advantage_estimate_loop(
            gamma, lmbda, value, next_value, reward, done, terminated, time_dim=dim
        )
    if kind == "td0":
        target = ref.td0_return_estimate_loop(gamma, next_value, reward, terminated)
    elif kind == "td1":
        target = ref.td1_return_estimate_loop(
            gamma, next_value, reward, done, terminated, time_dim=dim
        )
    else:
        target = ref.td_lambda_return_estimate_loop(
            gamma, lmbda, next_value, reward, done, terminated, time_dim=dim
        )
    return target - value, target


def make_estimator(kind, gamma=0.9, lmbda=0.8, **kwargs):
    if kind == "gae":
        return GAE(gamma=gamma, lmbda=lmbda, **kwargs)
    if kind == "td_lambda":
        return TDLambdaEstimator(gamma=gamma, lmbda=lmbda, **kwargs)
    return {"td0": TD0Estimator, "td1": TD1Estimator}[kind](gamma=gamma, **kwargs)


KINDS = ["td0", "td1", "td_lambda", "gae"]


class CountingCritic(torch.nn.Module):
    def __init__(self, out=1):
        super().__init__()
        self.linear = torch.nn.Linear(OBS, out)
        self.calls = 0

    def forward(self, obs):
        self.calls += 1
        return self.linear(obs)


def make_critic(out_key="state_value", in_key="observation"):
    return TensorDictModule(CountingCritic(), in_keys=[in_key], out_keys=[out_key])


# ----------------------------------------------------------------- numerics
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [(), (2, 3)], ids=str)
@pytest.mark.parametrize("steps", [1, 7, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_reference_loops(kind, batch, steps, dtype):
    td = make_td(batch, steps, dtype, seed=steps)
    expected_adv, expected_target = expected_loop(kind, td.clone(), 0.9, 0.8)
    out = make_estimator(kind)(td)
    assert out is td
    tol = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(td["advantage"], expected_adv, **tol)
    torch.testing.assert_close(td["value_target"], expected_target, **tol)
    assert td["advantage"].dtype == dtype


@pytest.mark.parametrize("kind", KINDS)
def test_multi_agent_nested_keys_broadcast_root_done(kind):
    td = make_td((2,), 9, agents=3, seed=1)
    est = make_estimator(kind).set_keys(
        reward=("agents", "reward"),
        value=("agents", "state_value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
    )
    expected_adv, expected_target = expected_loop(kind, td, 0.9, 0.8, prefix=("agents",))
    est(td)
    assert td["agents", "advantage"].shape == (2, 9, 3, 1)
    torch.testing.assert_close(td["agents", "advantage"], expected_adv)
    torch.testing.assert_close(td["agents", "value_target"], expected_target)


def test_nested_done_group_keys():
    td = make_td((2,), 6, seed=2)
    nested = TensorDict(batch_size=td.batch_size)
    for name in ("reward", "done", "terminated"):
        nested.set(name, td.get(("next", name)))
    td.set(("next", "group"), nested)
    for name in ("reward", "done", "terminated"):
        del td["next", name]
    est = GAE(gamma=0.9, lmbda=0.8).set_keys(
        reward=("group", "reward"), done=("group", "done"), terminated=("group", "terminated")
    )
    est(td)
    flat = make_td((2,), 6, seed=2)
    GAE(gamma=0.9, lmbda=0.8)(flat)
    torch.testing.assert_close(td["advantage"], flat["advantage"])


def test_terminated_missing_falls_back_to_done():
    td = make_td((2,), 8, seed=3)
    del td["next", "terminated"]
    GAE(gamma=0.9, lmbda=0.8)(td)
    td["next", "terminated"] = td["next", "done"].clone()
    expected, _ = expected_loop("gae", td, 0.9, 0.8)
    torch.testing.assert_close(td["advantage"], expected)


def test_average_gae_standardises_advantage_not_target():
    td = make_td((4,), 20, seed=4)
    expected_adv, expected_target = expected_loop("gae", td, 0.9, 0.8)
    GAE(gamma=0.9, lmbda=0.8, average_gae=True)(td)
    adv = td["advantage"]
    torch.testing.assert_close(adv.mean(), torch.tensor(0.0), atol=1e-6, rtol=0)
    # TorchRL standardises with the unbiased std (Tensor.std()).
    torch.testing.assert_close(adv.std(), torch.tensor(1.0))
    standard = (expected_adv - expected_adv.mean()) / expected_adv.std()
    torch.testing.assert_close(adv, standard)
    torch.testing.assert_close(td["value_target"], expected_target)


@pytest.mark.parametrize("kind", ["td0", "td1", "td_lambda"])
def test_average_rewards(kind):
    td = make_td((4,), 20, seed=5)
    reward = td["next", "reward"].clone()
    standard = td.clone()
    standard["next", "reward"] = (reward - reward.mean()) / reward.std()
    _, expected_target = expected_loop(kind, standard, 0.9, 0.8)
    make_estimator(kind, average_rewards=True)(td)
    torch.testing.assert_close(td["value_target"], expected_target)
    torch.testing.assert_close(td["next", "reward"], reward)  # the input is not modified


def test_tensor_gamma_is_a_buffer():
    est = GAE(gamma=torch.tensor(0.9), lmbda=0.8)
    assert "gamma" in dict(est.named_buffers())
    td = make_td((2,), 10, seed=6)
    expected, _ = expected_loop("gae", td, 0.9, 0.8)
    torch.testing.assert_close(est(td)["advantage"], expected)


# ----------------------------------------------------------------- value network
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [(), (2, 3)], ids=str)
def test_value_network_called_once(kind, batch):
    td = make_td(batch, 7, values=False, seed=7)
    critic = make_critic()
    make_estimator(kind, value_network=critic)(td)
    assert critic.module.calls == 1
    with torch.no_grad():
        torch.testing.assert_close(td["state_value"], critic.module.linear(td["observation"]))
        expected_next = critic.module.linear(td["next", "observation"])
    torch.testing.assert_close(td["next", "state_value"], expected_next)
    expected_adv, _ = expected_loop(kind, td, 0.9, 0.8)
    torch.testing.assert_close(td["advantage"], expected_adv)


def test_nested_value_network_keys():
    td = make_td((2,), 5, values=False, seed=8)
    td["agent", "obs"] = td.pop("observation")
    td["next", "agent", "obs"] = td["next"].pop("observation")
    critic = make_critic(out_key=("agent", "value"), in_key=("agent", "obs"))
    gae = GAE(gamma=0.9, lmbda=0.8, value_network=critic).set_keys(value=("agent", "value"))
    gae(td)
    assert critic.module.calls == 1
    assert td["next", "agent", "value"].shape == (2, 5, 1)
    assert ("agent", "obs") in gae.in_keys and ("next", "agent", "obs") in gae.in_keys
    assert gae.out_keys == [
        "advantage",
        "value_target",
        ("agent", "value"),
        ("next", "agent", "value"),
    ]


def test_skip_existing():
    td = make_td((2,), 6, seed=9)
    value = td["state_value"].clone()
    critic = make_critic()
    GAE(gamma=0.9, lmbda=0.8, value_network=critic, skip_existing=True)(td)
    assert critic.module.calls == 0
    torch.testing.assert_close(td["state_value"], value)
    GAE(gamma=0.9, lmbda=0.8, value_network=critic, skip_existing=False)(td)
    assert critic.module.calls == 1
    assert not torch.equal(td["state_value"], value)  # recomputed and written back
    # skip_existing only skips when both values are present
    del td["next", "state_value"]
    GAE(gamma=0.9, lmbda=0.8, value_network=critic, skip_existing=True)(td)
    assert critic.module.calls == 2


@pytest.mark.parametrize("kind", KINDS)
def test_differentiable(kind):
    td = make_td((2,), 6, values=False, seed=10)
    critic = make_critic()
    make_estimator(kind, value_network=critic, differentiable=True)(td)
    assert td["advantage"].requires_grad
    td["advantage"].sum().backward()
    assert critic.module.linear.weight.grad is not None
    assert critic.module.linear.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", KINDS)
def test_not_differentiable(kind):
    td = make_td((2,), 6, values=False, seed=11)
    make_estimator(kind, value_network=make_critic())(td)
    assert not td["advantage"].requires_grad
    assert not td["value_target"].requires_grad
    assert not td["state_value"].requires_grad
    # values that carry a graph do not leak it either
    td2 = make_td((2,), 6, seed=11)
    td2["state_value"].requires_grad_(True)
    make_estimator(kind)(td2)
    assert not td2["advantage"].requires_grad


# ----------------------------------------------------------------- keys
def test_set_keys_per_instance_and_chainable():
    a = GAE(gamma=0.9, lmbda=0.8)
    b = GAE(gamma=0.9, lmbda=0.8)
    assert a.set_keys(advantage="adv", value_target=("x", "vt")) is a
    assert a.tensor_keys.advantage == "adv" and a.tensor_keys.value_target == ("x", "vt")
    assert b.tensor_keys == ValueKeys()
    assert isinstance(a, ValueEstimatorBase)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.tensor_keys.reward = "r"  # type: ignore[misc]
    td = make_td((2,), 5, seed=12)
    a(td)
    assert "adv" in td.keys() and ("x", "vt") in td.keys(True)


def test_set_keys_flattens_nested_tuples():
    est = TD0Estimator(gamma=0.9).set_keys(reward=("a", ("b", "c")))
    assert est.tensor_keys.reward == ("a", "b", "c")


def test_value_estimators_enum():
    # TorchRL 0.14.1 order (its VTrace is not in tdrl)
    assert [e.name for e in ValueEstimators] == ["TD0", "TD1", "TDLambda", "GAE", "MAGAE"]


# ----------------------------------------------------------------- errors
def test_error_unknown_key_name_lists_valid_names():
    with pytest.raises(KeyError, match=r"unknown key name \(got 'rewards'.*'value_target'"):
        GAE(gamma=0.9, lmbda=0.8).set_keys(rewards="r")


def test_error_bad_key_type():
    with pytest.raises(TypeError, match=r"GAE\.set_keys: reward is not a nested key"):
        GAE(gamma=0.9, lmbda=0.8).set_keys(reward=3)


def test_error_missing_value_without_network():
    td = make_td((2,), 5, values=False, seed=13)
    with pytest.raises(KeyError, match=r"missing key 'state_value' \(got keys \[.*'observation'"):
        GAE(gamma=0.9, lmbda=0.8)(td)
    td["state_value"] = torch.zeros(2, 5, 1)
    with pytest.raises(KeyError, match=r"missing key \('next', 'state_value'\)"):
        GAE(gamma=0.9, lmbda=0.8)(td)


def test_error_missing_reward_names_key():
    td = make_td((2,), 5, seed=14)
    with pytest.raises(KeyError, match=r"TD1Estimator.forward: missing key \('next', 'rwd'\)"):
        TD1Estimator(gamma=0.9).set_keys(reward="rwd")(td)


def test_error_missing_network_input():
    td = make_td((2,), 5, values=False, seed=15)
    critic = make_critic(in_key="pixels")
    with pytest.raises(KeyError, match="missing key 'pixels'"):
        GAE(gamma=0.9, lmbda=0.8, value_network=critic)(td)


def test_error_network_without_value_key():
    td = make_td((2,), 5, values=False, seed=16)
    critic = make_critic(out_key="v")
    with pytest.raises(KeyError, match=r"did not write 'state_value' \(got out_keys \['v'\]"):
        GAE(gamma=0.9, lmbda=0.8, value_network=critic)(td)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "0.9", True])
def test_error_bad_gamma(bad):
    with pytest.raises(ValueError, match=r"GAE.__init__: gamma must be a finite non-negative"):
        GAE(gamma=bad, lmbda=0.8)
    with pytest.raises(ValueError, match=r"TDLambdaEstimator.__init__: lmbda must be"):
        TDLambdaEstimator(gamma=0.9, lmbda=bad)


def test_error_value_network_not_a_tensordict_module():
    with pytest.raises(TypeError, match=r"value_network has no in_keys \(got Linear"):
        GAE(gamma=0.9, lmbda=0.8, value_network=torch.nn.Linear(4, 1))  # type: ignore[arg-type]


def test_error_done_does_not_fit_reward():
    td = make_td((2,), 5, seed=17)
    td["next", "done"] = torch.zeros(2, 5, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\('next', 'done'\) does not fit the reward"):
        GAE(gamma=0.9, lmbda=0.8)(td)
