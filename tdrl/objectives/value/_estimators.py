"""TD(0), TD(1), TD(lambda) and GAE value estimators."""

from __future__ import annotations

import enum

from tensordict.nn import TensorDictModuleBase
from torch import Tensor

from tdrl.objectives.value import functional
from tdrl.objectives.value._base import ValueEstimatorBase, _standardise

__all__ = ["GAE", "TD0Estimator", "TD1Estimator", "TDLambdaEstimator", "ValueEstimators"]


class ValueEstimators(enum.Enum):
    """The available value estimators.

    Examples:
        >>> ValueEstimators.GAE.value
        'GAE'
        >>> ValueEstimators("TD(lambda)") is ValueEstimators.TDLambda
        True
    """

    TD0 = "TD(0)"
    TD1 = "TD(1)"
    TDLambda = "TD(lambda)"
    GAE = "GAE"


class _TDBase(ValueEstimatorBase):
    """TD estimators: optional reward standardisation and ``advantage = target - value``."""

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        value_network: TensorDictModuleBase | None = None,
        average_rewards: bool = False,
        differentiable: bool = False,
        skip_existing: bool = False,
    ) -> None:
        super().__init__(
            gamma=gamma,
            value_network=value_network,
            differentiable=differentiable,
            skip_existing=skip_existing,
        )
        self.average_rewards = average_rewards

    def _estimate(
        self,
        value: Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
    ) -> tuple[Tensor, Tensor]:
        if self.average_rewards:
            reward = _standardise(reward)
        target = self._target(next_value, reward, done, terminated, time_dim=time_dim)
        return target - value, target

    def _target(
        self, next_value: Tensor, reward: Tensor, done: Tensor, terminated: Tensor, *, time_dim: int
    ) -> Tensor:
        raise NotImplementedError


class TD0Estimator(_TDBase):
    """One-step TD targets ``r_t + gamma * (1 - terminated_t) * V(s_{t+1})``.

    Writes ``value_target`` and ``advantage = value_target - V(s_t)``. Data layout, value network
    handling and multi-agent broadcasting are described in :class:`ValueEstimatorBase`.

    Args:
        average_rewards: standardise the rewards (zero mean, unit std over all elements) first.
        gamma, value_network, differentiable, skip_existing: see :class:`ValueEstimatorBase`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(2, 1), "next": {
        ...     "reward": torch.ones(2, 1), "done": torch.tensor([[False], [True]]),
        ...     "state_value": torch.ones(2, 1)}}, batch_size=[2])
        >>> TD0Estimator(gamma=0.9)(td)["value_target"].squeeze(-1)
        tensor([1.9000, 1.0000])
    """

    def _target(
        self, next_value: Tensor, reward: Tensor, done: Tensor, terminated: Tensor, *, time_dim: int
    ) -> Tensor:
        return functional.td0_return_estimate(self.gamma, next_value, reward, terminated)


class TD1Estimator(_TDBase):
    """Monte-Carlo returns bootstrapped at truncations (see ``functional.td1_return_estimate``).

    Writes ``value_target`` and ``advantage = value_target - V(s_t)``. Data layout, value network
    handling and multi-agent broadcasting are described in :class:`ValueEstimatorBase`.

    Args:
        average_rewards: standardise the rewards (zero mean, unit std over all elements) first.
        gamma, value_network, differentiable, skip_existing: see :class:`ValueEstimatorBase`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(3, 1), "next": {
        ...     "reward": torch.ones(3, 1), "done": torch.zeros(3, 1, dtype=torch.bool),
        ...     "state_value": torch.zeros(3, 1)}}, batch_size=[3])
        >>> TD1Estimator(gamma=0.5)(td)["value_target"].squeeze(-1)
        tensor([1.7500, 1.5000, 1.0000])
    """

    def _target(
        self, next_value: Tensor, reward: Tensor, done: Tensor, terminated: Tensor, *, time_dim: int
    ) -> Tensor:
        return functional.td1_return_estimate(
            self.gamma, next_value, reward, done, terminated, time_dim=time_dim
        )


class TDLambdaEstimator(_TDBase):
    """TD(lambda) returns (see ``functional.td_lambda_return_estimate``).

    Writes ``value_target`` and ``advantage = value_target - V(s_t)``. Data layout, value network
    handling and multi-agent broadcasting are described in :class:`ValueEstimatorBase`.

    Args:
        lmbda: the lambda mixing factor (0 gives TD(0), 1 gives TD(1)).
        average_rewards: standardise the rewards (zero mean, unit std over all elements) first.
        gamma, value_network, differentiable, skip_existing: see :class:`ValueEstimatorBase`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(2, 1), "next": {
        ...     "reward": torch.ones(2, 1), "done": torch.zeros(2, 1, dtype=torch.bool),
        ...     "state_value": torch.full((2, 1), 4.0)}}, batch_size=[2])
        >>> TDLambdaEstimator(gamma=0.5, lmbda=0.5)(td)["value_target"].squeeze(-1)
        tensor([2.7500, 3.0000])
    """

    lmbda: float | Tensor

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        lmbda: float | Tensor,
        value_network: TensorDictModuleBase | None = None,
        average_rewards: bool = False,
        differentiable: bool = False,
        skip_existing: bool = False,
    ) -> None:
        super().__init__(
            gamma=gamma,
            value_network=value_network,
            average_rewards=average_rewards,
            differentiable=differentiable,
            skip_existing=skip_existing,
        )
        self._set_factor("lmbda", lmbda)

    def _target(
        self, next_value: Tensor, reward: Tensor, done: Tensor, terminated: Tensor, *, time_dim: int
    ) -> Tensor:
        return functional.td_lambda_return_estimate(
            self.gamma, self.lmbda, next_value, reward, done, terminated, time_dim=time_dim
        )


class GAE(ValueEstimatorBase):
    """Generalized advantage estimation (see ``functional.generalized_advantage_estimate``).

    Writes ``advantage`` and ``value_target = advantage + V(s_t)`` (computed before any
    standardisation). Data layout, value network handling and multi-agent broadcasting are
    described in :class:`ValueEstimatorBase`.

    Args:
        lmbda: the GAE lambda.
        average_gae: standardise the advantage (zero mean, unit std over all elements).
        gamma, value_network, differentiable, skip_existing: see :class:`ValueEstimatorBase`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> critic = TensorDictModule(torch.nn.Linear(4, 1), in_keys=["observation"],
        ...                           out_keys=["state_value"])
        >>> td = TensorDict({"observation": torch.randn(2, 10, 4), "next": {
        ...     "observation": torch.randn(2, 10, 4), "reward": torch.randn(2, 10, 1),
        ...     "done": torch.zeros(2, 10, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(2, 10, 1, dtype=torch.bool)}}, batch_size=[2, 10])
        >>> td = GAE(gamma=0.99, lmbda=0.95, value_network=critic)(td)
        >>> td["advantage"].shape, td["value_target"].shape
        (torch.Size([2, 10, 1]), torch.Size([2, 10, 1]))
    """

    lmbda: float | Tensor

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        lmbda: float | Tensor,
        value_network: TensorDictModuleBase | None = None,
        average_gae: bool = False,
        differentiable: bool = False,
        skip_existing: bool = False,
    ) -> None:
        super().__init__(
            gamma=gamma,
            value_network=value_network,
            differentiable=differentiable,
            skip_existing=skip_existing,
        )
        self._set_factor("lmbda", lmbda)
        self.average_gae = average_gae

    def _estimate(
        self,
        value: Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
    ) -> tuple[Tensor, Tensor]:
        advantage, target = functional.generalized_advantage_estimate(
            self.gamma,
            self.lmbda,
            value,
            next_value,
            reward,
            done,
            terminated,
            time_dim=time_dim,
        )
        if self.average_gae:
            advantage = _standardise(advantage)
        return advantage, target
