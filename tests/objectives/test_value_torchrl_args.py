"""TorchRL's value-estimator arguments: time_dim, params, value_estimate, chunks, groups, ..."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, set_skip_existing
from torch import nn

from tdrl.objectives.value import GAE, TD0Estimator, TDLambdaEstimator, functional


def _traj(b: int = 3, t: int = 6, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(b, t, 1, generator=g) < 0.2
    return TensorDict(
        {
            "obs": torch.randn(b, t, 2, generator=g),
            "next": {
                "obs": torch.randn(b, t, 2, generator=g),
                "reward": torch.randn(b, t, 1, generator=g),
                "done": done,
                "terminated": done & (torch.rand(b, t, 1, generator=g) < 0.5),
                "truncated": done & (torch.rand(b, t, 1, generator=g) < 0.5),
            },
        },
        [b, t],
    )


class _Counting(nn.Linear):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        return super().forward(x)


def _critic() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(_Counting(2, 1), ["obs"], ["state_value"])


def _gae_ref(td, gamma, lmbda, net, reward=None, terminated=None):
    with torch.no_grad():
        v, nv = net.module(td["obs"]), net.module(td["next", "obs"])
    nxt = td["next"]
    return functional.generalized_advantage_estimate(
        gamma,
        lmbda,
        v,
        nv,
        nxt["reward"] if reward is None else reward,
        nxt["done"],
        nxt["terminated"] if terminated is None else terminated,
        time_dim=1,
    )


def test_time_dim_first_dim_equals_transposed_data():
    td = _traj()
    net = _critic()
    adv, target = _gae_ref(td, 0.9, 0.8, net)
    swapped = td.transpose(0, 1).contiguous()
    GAE(gamma=0.9, lmbda=0.8, value_network=net, time_dim=0)(swapped)
    torch.testing.assert_close(swapped["advantage"], adv.transpose(0, 1))
    named = td.transpose(0, 1).contiguous()
    named.names = ["time", None]  # without time_dim, the dim named "time" is the time dim
    GAE(gamma=0.9, lmbda=0.8, value_network=net)(named)
    torch.testing.assert_close(named["value_target"], target.transpose(0, 1))
    with pytest.raises(ValueError, match="time_dim is out of range"):
        GAE(gamma=0.9, lmbda=0.8, value_network=net, time_dim=2)(td.clone())


def test_forward_params_and_target_params():
    td = _traj()
    net = _critic()
    params = TensorDict.from_module(net).clone().apply(lambda p: p + 1.0)
    target = TensorDict.from_module(net).clone().apply(lambda p: p * 0.0)
    TD0Estimator(gamma=0.5, value_network=net)(td, params=params, target_params=target)
    # target params are zero: V(s') = 0, so the target is the reward
    torch.testing.assert_close(td["value_target"], td["next", "reward"])
    with torch.no_grad():
        w = net.module.weight + 1.0
        b = net.module.bias + 1.0
    torch.testing.assert_close(td["state_value"], td["obs"] @ w.T + b)


def test_value_estimate_returns_the_target_without_writing():
    td = _traj()
    td["state_value"] = torch.zeros(3, 6, 1)
    nv = torch.full((3, 6, 1), 2.0)
    out = TD0Estimator(gamma=0.5).value_estimate(td, next_value=nv)
    nxt = td["next"]
    expected = nxt["reward"] + 0.5 * 2.0 * (~nxt["terminated"]).float()
    torch.testing.assert_close(out, expected)
    assert "value_target" not in td.keys()


@pytest.mark.parametrize("chunks", [{"num_chunks": 2}, {"num_chunk": 3}, {"value_chunk_size": 1}])
def test_chunked_value_calls_give_the_same_values(chunks):
    td = _traj()
    net = _critic()
    adv, _ = _gae_ref(td, 0.9, 0.8, net)
    _Counting.calls = 0
    GAE(gamma=0.9, lmbda=0.8, value_network=net, **chunks)(td)
    torch.testing.assert_close(td["advantage"], adv)
    assert (
        _Counting.calls
        == {"num_chunks": 2, "num_chunk": 3, "value_chunk_size": 3}[next(iter(chunks))]
    )


def test_chunk_argument_errors():
    with pytest.raises(ValueError, match="num_chunks and num_chunk differ"):
        GAE(gamma=0.9, lmbda=0.9, num_chunks=2, num_chunk=3)
    with pytest.raises(ValueError, match="exclusive"):
        GAE(gamma=0.9, lmbda=0.9, num_chunks=2, value_chunk_size=3)
    with pytest.raises(ValueError, match="positive int"):
        GAE(gamma=0.9, lmbda=0.9, value_chunk_size=0)


def test_group_key_standardises_within_groups():
    td = _traj(b=4)
    td["task"] = torch.tensor([0, 0, 1, 1]).unsqueeze(-1).expand(4, 6)
    net = _critic()
    adv, _ = _gae_ref(td, 0.9, 0.8, net)
    GAE(gamma=0.9, lmbda=0.8, value_network=net, average_gae=True, group_key="task")(td)
    for rows in ([0, 1], [2, 3]):
        a = adv[rows]
        torch.testing.assert_close(td["advantage"][rows], (a - a.mean()) / a.std())


def test_auto_reset_env_folds_the_value_into_truncated_rewards():
    td = _traj()
    net = _critic()
    with torch.no_grad():
        v = net.module(td["obs"])
    nxt = td["next"]
    reward = nxt["reward"] + 0.9 * v * nxt["truncated"].float()
    adv, _ = _gae_ref(td, 0.9, 0.8, net, reward=reward, terminated=nxt["done"])
    GAE(gamma=0.9, lmbda=0.8, value_network=net, auto_reset_env=True)(td)
    torch.testing.assert_close(td["advantage"], adv)


def test_vectorized_false_shifted_and_deactivate_vmap_give_the_same_numbers():
    td = _traj()
    net = _critic()
    adv, target = _gae_ref(td, 0.9, 0.8, net)
    for kwargs in ({"vectorized": False}, {"shifted": True}, {"deactivate_vmap": True}):
        out = GAE(gamma=0.9, lmbda=0.8, value_network=net, **kwargs)(td.clone())
        torch.testing.assert_close(out["advantage"], adv)
        torch.testing.assert_close(out["value_target"], target)
    loop = TDLambdaEstimator(gamma=0.9, lmbda=0.8, value_network=net, vectorized=False)
    vec = TDLambdaEstimator(gamma=0.9, lmbda=0.8, value_network=net)
    torch.testing.assert_close(loop(td.clone())["value_target"], vec(td.clone())["value_target"])


def test_skip_existing_none_follows_the_global_setting():
    td = _traj()
    td["state_value"] = torch.zeros(3, 6, 1)
    td["next", "state_value"] = torch.zeros(3, 6, 1)
    est = TD0Estimator(gamma=0.5, value_network=_critic())
    with set_skip_existing(True):
        est(td)
    torch.testing.assert_close(td["value_target"], td["next", "reward"])  # zeros were kept
    est(td)  # the global default (False): recomputed
    assert not torch.equal(td["next", "state_value"], torch.zeros(3, 6, 1))


def test_device_places_tensor_factors():
    est = GAE(gamma=torch.tensor(0.9, dtype=torch.float64), lmbda=0.9, device="meta")
    assert est.gamma.device.type == "meta"


def test_functional_rolling_gamma_is_accepted_positionally_and_checked():
    done = torch.zeros(3, 1, dtype=torch.bool)
    v, r = torch.ones(3, 1), torch.ones(3, 1)
    base = functional.td1_return_estimate(0.5, v, r, done)
    torch.testing.assert_close(functional.td1_return_estimate(0.5, v, r, done, None, True), base)
    with pytest.raises(ValueError, match="rolling_gamma=False is not supported"):
        functional.td1_return_estimate(0.5, v, r, done, None, False)
    with pytest.raises(ValueError, match="rolling_gamma=False is not supported"):
        functional.td_lambda_return_estimate(0.5, 0.5, v, r, done, None, False)


def test_gae_value_estimate_takes_params_first():
    td = _traj()
    net = _critic()
    zero = TensorDict.from_module(net).clone().apply(lambda p: p * 0.0)
    # V = 0 everywhere: the GAE target (advantage + V) is the TD(lambda) return of V = 0
    target = GAE(gamma=0.9, lmbda=0.8, value_network=net).value_estimate(td, zero, zero)
    nxt = td["next"]
    expected = functional.td_lambda_return_estimate(
        0.9, 0.8, torch.zeros(3, 6, 1), nxt["reward"], nxt["done"], nxt["terminated"], time_dim=1
    )
    torch.testing.assert_close(target, expected)
    assert "advantage" not in td.keys()
