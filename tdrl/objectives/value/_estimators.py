"""TD(0), TD(1), TD(lambda) and GAE value estimators."""

from __future__ import annotations

import enum

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives.value import _reference, functional
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
    MAGAE = "MAGAE"


class _TDBase(ValueEstimatorBase):
    """TD estimators: optional reward standardisation and ``advantage = target - value``."""

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        average_rewards: bool = False,
        value_network: TensorDictModuleBase | None = None,
        shifted: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        device: torch.device | str | None = None,
        time_dim: int | None = None,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        group_key: NestedKey | None = None,
    ) -> None:
        super().__init__(
            gamma=gamma,
            value_network=value_network,
            shifted=shifted,
            differentiable=differentiable,
            skip_existing=skip_existing,
            device=device,
            time_dim=time_dim,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            group_key=group_key,
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
        tensordict: TensorDictBase | None = None,
    ) -> tuple[Tensor, Tensor]:
        gamma = self._discount(tensordict, reward)
        if self.average_rewards:
            reward = _standardise(reward, 1e-5, self._groups(tensordict))
        target = self._target(gamma, next_value, reward, done, terminated, time_dim=time_dim)
        return target - value, target

    def _target(
        self,
        gamma: float | Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
    ) -> Tensor:
        raise NotImplementedError


class TD0Estimator(_TDBase):
    """One-step TD targets ``r_t + gamma * (1 - terminated_t) * V(s_{t+1})``.

    Writes ``value_target`` and ``advantage = value_target - V(s_t)``. Data layout, value network
    handling and multi-agent broadcasting are described in :class:`ValueEstimatorBase`.

    Args:
        average_rewards: standardise the rewards (zero mean, unbiased unit std over all
            elements, or within the ``group_key`` groups) first.
        gamma, value_network, shifted, differentiable, skip_existing, device, time_dim,
            deactivate_vmap, value_chunk_size, num_chunks, num_chunk, value_chunk_dim,
            group_key: see :class:`ValueEstimatorBase`.

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
        self,
        gamma: float | Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
    ) -> Tensor:
        return functional.td0_return_estimate(gamma, next_value, reward, terminated)


class TD1Estimator(_TDBase):
    """Monte-Carlo returns bootstrapped at truncations (see ``functional.td1_return_estimate``).

    Writes ``value_target`` and ``advantage = value_target - V(s_t)``. Data layout, value network
    handling and multi-agent broadcasting are described in :class:`ValueEstimatorBase`.

    Args:
        average_rewards: standardise the rewards (zero mean, unbiased unit std over all
            elements, or within the ``group_key`` groups) first.
        gamma, value_network, shifted, differentiable, skip_existing, device, time_dim,
            deactivate_vmap, value_chunk_size, num_chunks, num_chunk, value_chunk_dim,
            group_key: see :class:`ValueEstimatorBase`.

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
        self,
        gamma: float | Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
    ) -> Tensor:
        return functional.td1_return_estimate(
            gamma, next_value, reward, done, terminated, time_dim=time_dim
        )


class TDLambdaEstimator(_TDBase):
    """TD(lambda) returns (see ``functional.td_lambda_return_estimate``).

    Writes ``value_target`` and ``advantage = value_target - V(s_t)``. Data layout, value network
    handling and multi-agent broadcasting are described in :class:`ValueEstimatorBase`.

    Args:
        lmbda: the lambda mixing factor (0 gives TD(0), 1 gives TD(1)).
        average_rewards: standardise the rewards (zero mean, unbiased unit std over all
            elements, or within the ``group_key`` groups) first.
        vectorized: ``True`` (default) runs the vectorised recursion, ``False`` the step-by-step
            loop (TorchRL's two implementations; the same returns).
        gamma, value_network, shifted, differentiable, skip_existing, device, time_dim,
            deactivate_vmap, value_chunk_size, num_chunks, num_chunk, value_chunk_dim,
            group_key: see :class:`ValueEstimatorBase`.

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
        average_rewards: bool = False,
        vectorized: bool = True,
        value_network: TensorDictModuleBase | None = None,
        shifted: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        device: torch.device | str | None = None,
        time_dim: int | None = None,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        group_key: NestedKey | None = None,
    ) -> None:
        super().__init__(
            gamma=gamma,
            average_rewards=average_rewards,
            value_network=value_network,
            shifted=shifted,
            differentiable=differentiable,
            skip_existing=skip_existing,
            device=device,
            time_dim=time_dim,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            group_key=group_key,
        )
        self.vectorized = vectorized
        self._set_factor("lmbda", lmbda)

    def _target(
        self,
        gamma: float | Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
    ) -> Tensor:
        fn = (
            functional.td_lambda_return_estimate
            if self.vectorized
            else _reference.td_lambda_return_estimate_loop
        )
        return fn(gamma, self.lmbda, next_value, reward, done, terminated, time_dim=time_dim)


class GAE(ValueEstimatorBase):
    """Generalized advantage estimation (see ``functional.generalized_advantage_estimate``).

    Writes ``advantage`` and ``value_target = advantage + V(s_t)`` (computed before any
    standardisation). Data layout, value network handling and multi-agent broadcasting are
    described in :class:`ValueEstimatorBase`.

    Args:
        lmbda: the GAE lambda.
        average_gae: standardise the advantage (zero mean, unit std over all elements, or
            within the ``group_key`` groups).
        vectorized: ``False`` runs the step-by-step loop instead of the vectorised recursion
            (``None``/``True``, default); the same advantages.
        auto_reset_env: as TorchRL: a truncated step (``("next", "truncated")``) adds
            ``gamma * V(s_t)`` to its reward and ends the recursion like a terminal step.
        gamma, value_network, shifted, differentiable, skip_existing, device, time_dim,
            deactivate_vmap, value_chunk_size, num_chunks, num_chunk, value_chunk_dim,
            group_key: see :class:`ValueEstimatorBase`.

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
        average_gae: bool = False,
        vectorized: bool | None = None,
        auto_reset_env: bool = False,
        value_network: TensorDictModuleBase | None = None,
        shifted: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        device: torch.device | str | None = None,
        time_dim: int | None = None,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        group_key: NestedKey | None = None,
    ) -> None:
        super().__init__(
            gamma=gamma,
            value_network=value_network,
            shifted=shifted,
            differentiable=differentiable,
            skip_existing=skip_existing,
            device=device,
            time_dim=time_dim,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            group_key=group_key,
        )
        self.vectorized = vectorized
        self.auto_reset_env = auto_reset_env
        self._set_factor("lmbda", lmbda)
        self.average_gae = average_gae

    def value_estimate(  # type: ignore[override]
        self,
        tensordict: TensorDictBase,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        time_dim: int | None = None,
        next_value: Tensor | None = None,
        **kwargs: object,
    ) -> Tensor:
        """Returns the value target (advantage + value) without writing it (TorchRL's order).

        Args:
            tensordict: the data.
            params: parameters of the value network for the root values.
            target_params: parameters for the next values (``params`` detached when None).
            time_dim: the time dim of ``tensordict`` (overrides the constructor's).
            next_value: bootstrap values to use instead of the network's.
            **kwargs: keyword arguments passed to every call of the value network.
        """
        return super().value_estimate(
            tensordict, target_params, next_value, time_dim=time_dim, params=params, **kwargs
        )

    def _estimate(
        self,
        value: Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
        tensordict: TensorDictBase | None = None,
    ) -> tuple[Tensor, Tensor]:
        gamma = self._discount(tensordict, reward)
        if self.auto_reset_env:
            # TorchRL: a truncated step bootstraps from V(s_t) folded into its reward, and
            # every done step (truncated or terminated) ends the recursion.
            if tensordict is None:
                raise ValueError(
                    "GAE: auto_reset_env=True needs the tensordict (got tensors only). Call the "
                    "estimator on the tensordict."
                )
            truncated = self._get(tensordict, ("next", "truncated"))
            truncated = self._expand_flag(truncated, reward, "truncated").to(reward.dtype)
            reward = reward + gamma * value * truncated
            terminated = done
        fn = (
            _reference.generalized_advantage_estimate_loop
            if self.vectorized is False
            else functional.generalized_advantage_estimate
        )
        advantage, target = fn(
            gamma,
            self.lmbda,
            value,
            next_value,
            reward,
            done,
            terminated,
            time_dim=time_dim,
        )
        if self.average_gae:
            advantage = _standardise(advantage, 1e-4, self._groups(tensordict))
        return advantage, target
