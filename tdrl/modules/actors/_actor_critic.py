"""ActorCriticOperator: a shared trunk feeding a policy head and a value head."""

from __future__ import annotations

from typing import cast

from tensordict.nn import (
    ProbabilisticTensorDictSequential,
    TensorDictModuleBase,
    TensorDictSequential,
)

__all__ = ["ActorCriticOperator"]


class ActorCriticOperator(TensorDictSequential):
    """Runs a shared trunk, then the policy head, then the value head.

    Calling it writes the trunk's hidden keys, the action (and the policy's other outputs) and
    the value. :meth:`get_policy_operator` and :meth:`get_value_operator` return trunk + head
    sequences that share the parameters (for collection and for the losses).

    Args:
        common_operator: the trunk (reads observations, writes hidden features).
        policy_operator: the policy head (reads the hidden features, writes the action), e.g. a
            :class:`~tdrl.modules.ProbabilisticActor`.
        value_operator: the value head (reads the hidden features, or also the action).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import Actor, ValueOperator
        >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
        >>> op = ActorCriticOperator(
        ...     trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
        ...     ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"]),
        ... )
        >>> td = TensorDict(observation=torch.zeros(4, 3), batch_size=[4])
        >>> sorted(op(td.clone()).keys())
        ['action', 'hidden', 'observation', 'state_value']
        >>> "state_value" in op.get_policy_operator()(td.clone()).keys()
        False
    """

    def __init__(
        self,
        common_operator: TensorDictModuleBase,
        policy_operator: TensorDictModuleBase,
        value_operator: TensorDictModuleBase,
    ) -> None:
        super().__init__(common_operator, policy_operator, value_operator)

    @property
    def common_operator(self) -> TensorDictModuleBase:
        """The shared trunk."""
        return cast(TensorDictModuleBase, self.module[0])

    def get_policy_operator(self) -> TensorDictSequential:
        """Trunk then policy head (probabilistic when the head is, so ``get_dist`` works).

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from tdrl.modules import Actor, ValueOperator
            >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
            >>> op = ActorCriticOperator(
            ...     trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
            ...     ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"]),
            ... )
            >>> op.get_policy_operator().out_keys
            ['hidden', 'action']
        """
        common = self.common_operator
        policy = cast(TensorDictModuleBase, self.module[1])
        if isinstance(policy, ProbabilisticTensorDictSequential):
            # Flattened: tensordict 0.15's get_dist skips the parameter module of a nested
            # probabilistic sequence.
            return ProbabilisticTensorDictSequential(common, *policy.module)
        return TensorDictSequential(common, policy)

    def get_value_operator(self) -> TensorDictSequential:
        """Trunk then value head.

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from tdrl.modules import Actor, ValueOperator
            >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
            >>> op = ActorCriticOperator(
            ...     trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
            ...     ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"]),
            ... )
            >>> op.get_value_operator().out_keys
            ['hidden', 'state_value']
        """
        return TensorDictSequential(
            self.common_operator, cast(TensorDictModuleBase, self.module[2])
        )
