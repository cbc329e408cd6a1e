"""Actor-critic containers: a policy and a value network, with or without a shared trunk."""

from __future__ import annotations

from typing import cast

from tensordict.nn import (
    ProbabilisticTensorDictSequential,
    TensorDictModuleBase,
    TensorDictSequential,
)

__all__ = ["ActorCriticOperator", "ActorCriticWrapper", "ActorValueOperator"]


class ActorValueOperator(TensorDictSequential):
    """Runs a shared trunk, then the policy head, then the state-value head.

    Calling it writes the trunk's hidden keys, the action (and the policy's other outputs) and
    the value. :meth:`get_policy_operator` and :meth:`get_value_operator` return trunk + head
    sequences that share the parameters (for collection and for the losses).

    Args:
        common_operator: the trunk (reads observations, writes hidden features).
        policy_operator: the policy head (reads the hidden features, writes the action), e.g. a
            :class:`~tdrl.modules.ProbabilisticActor`.
        value_operator: the value head (reads the hidden features, writes e.g.
            ``"state_value"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import Actor, ValueOperator
        >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
        >>> op = ActorValueOperator(
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

    def get_policy_head(self) -> TensorDictModuleBase:
        """The policy head alone (without the trunk)."""
        return cast(TensorDictModuleBase, self.module[1])

    def get_value_head(self) -> TensorDictModuleBase:
        """The value head alone (without the trunk)."""
        return cast(TensorDictModuleBase, self.module[2])

    def get_policy_operator(self) -> TensorDictSequential:
        """Trunk then policy head (probabilistic when the head is, so ``get_dist`` works).

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from tdrl.modules import Actor, ValueOperator
            >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
            >>> op = ActorValueOperator(
            ...     trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
            ...     ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"]),
            ... )
            >>> op.get_policy_operator().out_keys
            ['hidden', 'action']
        """
        common = self.common_operator
        policy = self.get_policy_head()
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
            >>> op = ActorValueOperator(
            ...     trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
            ...     ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"]),
            ... )
            >>> op.get_value_operator().out_keys
            ['hidden', 'state_value']
        """
        return TensorDictSequential(self.common_operator, self.get_value_head())


class ActorCriticOperator(ActorValueOperator):
    """Shared trunk, policy head, then a critic head that scores the state *and* the action.

    As :class:`ActorValueOperator`, but the third module is a Q-value head that reads the
    action written by the policy (e.g. ``in_keys=["hidden", "action"]``,
    ``out_keys=["state_action_value"]``). Calling it runs trunk, policy and critic;
    :meth:`get_critic_operator` is the whole operator, :meth:`get_policy_operator` the trunk
    and the policy. There is no state-value operator: :meth:`get_value_operator` raises.

    Args:
        common_operator: the trunk.
        policy_operator: the policy head.
        value_operator: the critic head; its first output must not be ``"state_value"``
            (use :class:`ActorValueOperator` for a state value).

    Raises:
        ValueError: the critic head's first output is ``"state_value"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import MLP, Actor, ValueOperator
        >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
        >>> critic = ValueOperator(  # MLP concatenates its inputs
        ...     MLP(10, 1, depth=0), in_keys=["hidden", "action"], out_keys=["state_action_value"]
        ... )
        >>> op = ActorCriticOperator(trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]), critic)
        >>> td = TensorDict(observation=torch.zeros(4, 3), batch_size=[4])
        >>> op.get_critic_operator()(td)["state_action_value"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        common_operator: TensorDictModuleBase,
        policy_operator: TensorDictModuleBase,
        value_operator: TensorDictModuleBase,
    ) -> None:
        out_keys = list(value_operator.out_keys)
        if out_keys and out_keys[0] == "state_value":
            raise ValueError(
                "ActorCriticOperator.__init__: the critic head writes 'state_value' (got "
                f"out_keys={out_keys}; expected a state-action value such as "
                "'state_action_value', computed from the action). Set the critic's out_keys, or "
                "use ActorValueOperator for a state-value head."
            )
        super().__init__(common_operator, policy_operator, value_operator)

    def get_critic_operator(self) -> ActorCriticOperator:
        """The operator itself: trunk, policy and critic (the critic needs the action)."""
        return self

    def get_value_operator(self) -> TensorDictSequential:
        """Not available: the critic scores state-action pairs; raises ``RuntimeError``.

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from tdrl.modules import MLP, Actor, ValueOperator
            >>> trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
            >>> critic = ValueOperator(MLP(10, 1, depth=0), in_keys=["hidden", "action"],
            ...                        out_keys=["state_action_value"])
            >>> ActorCriticOperator(
            ...     trunk, Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]), critic
            ... ).get_value_operator()
            Traceback (most recent call last):
            ...
            RuntimeError: ActorCriticOperator.get_value_operator: ...
        """
        raise RuntimeError(
            "ActorCriticOperator.get_value_operator: this operator's critic scores state-action "
            "pairs (got a call to get_value_operator(); expected get_critic_operator()). Use "
            "get_critic_operator(), or ActorValueOperator for a state-value network."
        )


class ActorCriticWrapper(TensorDictSequential):
    """A policy and a value network without a shared trunk, run one after the other.

    Calling it writes the action and the value; :meth:`get_policy_operator` and
    :meth:`get_value_operator` return the two networks themselves.

    Args:
        policy_operator: the policy (reads the observation, writes the action).
        value_operator: the value network (reads the observation, or also the action).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.modules import Actor, ValueOperator
        >>> policy = Actor(torch.nn.Linear(3, 2))
        >>> value = ValueOperator(torch.nn.Linear(3, 1))
        >>> op = ActorCriticWrapper(policy, value)
        >>> td = TensorDict(observation=torch.zeros(4, 3), batch_size=[4])
        >>> sorted(op(td).keys())
        ['action', 'observation', 'state_value']
        >>> op.get_policy_operator() is policy
        True
    """

    def __init__(
        self, policy_operator: TensorDictModuleBase, value_operator: TensorDictModuleBase
    ) -> None:
        super().__init__(policy_operator, value_operator)

    def get_policy_operator(self) -> TensorDictModuleBase:
        """The policy network."""
        return cast(TensorDictModuleBase, self.module[0])

    def get_value_operator(self) -> TensorDictModuleBase:
        """The value network."""
        return cast(TensorDictModuleBase, self.module[1])

    def get_policy_head(self) -> TensorDictModuleBase:
        """The policy network (there is no trunk)."""
        return self.get_policy_operator()

    def get_value_head(self) -> TensorDictModuleBase:
        """The value network (there is no trunk)."""
        return self.get_value_operator()
