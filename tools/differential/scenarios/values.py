"""Value estimators (GAE, TD0, TD1, TDLambda) and their functional forms on fixed trajectories."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..registry import capture, scenario
from ._common import mlp, rand

ENVS, T, OBS = 2, 5, 3


def trajectory(truncate: bool = False) -> TensorDict:
    """``[2, 5]`` steps: env 0 terminates at t=2 (or is truncated there), env 1 runs on."""
    end = torch.zeros(ENVS, T, 1, dtype=torch.bool)
    end[0, 2] = True
    terminated = end.clone() if not truncate else torch.zeros_like(end)
    truncated = end.clone() if truncate else torch.zeros_like(end)
    return TensorDict(
        {
            "observation": rand(ENVS, T, OBS, seed=20),
            "next": {
                "observation": rand(ENVS, T, OBS, seed=21),
                "reward": rand(ENVS, T, 1, seed=22),
                "done": end,
                "terminated": terminated,
                "truncated": truncated,
            },
        },
        [ENVS, T],
    )


def value_net(lib: Any) -> Any:
    return lib.modules.ValueOperator(mlp([OBS, 8, 1], seed=23), in_keys=["observation"])


def _estimate(lib: Any, cls: str, truncate: bool = False, **kwargs: Any) -> Any:
    estimator = getattr(lib.value, cls)(value_network=value_net(lib), **kwargs)
    td = trajectory(truncate)
    out = capture(lambda: estimator(td))
    return out.detach() if not isinstance(out, Exception) else out


CASES = {
    "GAE": {"gamma": 0.9, "lmbda": 0.8},
    "TD0Estimator": {"gamma": 0.9},
    "TD1Estimator": {"gamma": 0.9},
    "TDLambdaEstimator": {"gamma": 0.9, "lmbda": 0.8},
}

for _cls, _kwargs in CASES.items():
    for _truncate in (False, True):

        def _make(
            cls: str = _cls, kwargs: dict[str, Any] = _kwargs, truncate: bool = _truncate
        ) -> None:
            @scenario(f"values/{cls}/{'truncated' if truncate else 'terminated'}")
            def _(lib: Any) -> Any:
                return _estimate(lib, cls, truncate, **kwargs)

        _make()


@scenario("values/GAE/average_gae")
def _(lib: Any) -> Any:
    return _estimate(lib, "GAE", gamma=0.9, lmbda=0.8, average_gae=True)


@scenario("values/GAE/defaults")
def _(lib: Any) -> Any:
    estimator = lib.value.GAE(gamma=0.99, lmbda=0.95, value_network=value_net(lib))
    keys = estimator.tensor_keys
    names = (
        "advantage",
        "value_target",
        "value",
        "reward",
        "done",
        "terminated",
        "steps_to_next_obs",
    )
    return {
        "keys": {n: capture(lambda n=n: str(getattr(keys, n))) for n in names},
        "average_gae": capture(lambda: estimator.average_gae),
        "differentiable": capture(lambda: estimator.differentiable),
    }


@scenario("values/TDLambdaEstimator/vectorized_false")
def _(lib: Any) -> Any:
    return _estimate(lib, "TDLambdaEstimator", gamma=0.9, lmbda=0.8, vectorized=False)


@scenario("values/GAE/time_dim_first")
def _(lib: Any) -> Any:
    estimator = lib.value.GAE(gamma=0.9, lmbda=0.8, value_network=value_net(lib))
    td = trajectory().transpose(0, 1).contiguous()  # [T, envs]
    out = capture(lambda: estimator(td, time_dim=0))
    return out.detach() if not isinstance(out, Exception) else out


def _flat() -> dict[str, torch.Tensor]:
    td = trajectory()
    return {
        "reward": td["next", "reward"],
        "done": td["next", "done"],
        "terminated": td["next", "terminated"],
        "state_value": rand(ENVS, T, 1, seed=24),
        "next_state_value": rand(ENVS, T, 1, seed=25),
    }


@scenario("values/functional/generalized_advantage_estimate")
def _(lib: Any) -> Any:
    f = _flat()
    return lib.functional.generalized_advantage_estimate(
        0.9, 0.8, f["state_value"], f["next_state_value"], f["reward"], f["done"], f["terminated"]
    )


@scenario("values/functional/td0_return_estimate")
def _(lib: Any) -> Any:
    f = _flat()
    return lib.functional.td0_return_estimate(
        0.9, f["next_state_value"], f["reward"], terminated=f["terminated"]
    )


@scenario("values/functional/td1_return_estimate")
def _(lib: Any) -> Any:
    f = _flat()
    return lib.functional.td1_return_estimate(
        0.9, f["next_state_value"], f["reward"], f["done"], f["terminated"]
    )


@scenario("values/functional/td_lambda_return_estimate")
def _(lib: Any) -> Any:
    f = _flat()
    return lib.functional.td_lambda_return_estimate(
        0.9, 0.8, f["next_state_value"], f["reward"], f["done"], f["terminated"]
    )


@scenario("values/functional/vec_generalized_advantage_estimate")
def _(lib: Any) -> Any:
    f = _flat()
    return lib.functional.vec_generalized_advantage_estimate(
        0.9, 0.8, f["state_value"], f["next_state_value"], f["reward"], f["done"], f["terminated"]
    )


@scenario("values/MultiStep/n3")
def _(lib: Any) -> Any:
    td = trajectory()
    td["next", "reward"] = torch.arange(10.0).reshape(2, 5, 1)
    return capture(lambda: lib.data.MultiStep(gamma=0.9, n_steps=3)(td))
