"""Small networks and batches that loss tests and loss examples share.

Every builder reads flat keys (``"observation"``) or, with ``nested=True``, keys under
``"agents"`` (``("agents", "observation")``), so one test can cover both layouts. Networks
are tiny (16 hidden cells) so that tests stay fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from tdrl.modules import MLP, NormalParamExtractor, OneHotCategorical, TanhNormal

NestedKey = str | tuple[str, ...]


def nested_key(nested: bool, name: str) -> NestedKey:
    """``name`` at the root, or ``("agents", name)`` when ``nested``.

    Examples:
        >>> nested_key(True, "action")
        ('agents', 'action')
    """
    return ("agents", name) if nested else name


def agents_keys(*names: str, **renamed: str) -> dict[str, tuple[str, str]]:
    """``set_keys`` arguments that move each named key under ``"agents"``.

    Examples:
        >>> agents_keys("action", value="state_value")
        {'action': ('agents', 'action'), 'value': ('agents', 'state_value')}
    """
    return {name: ("agents", name) for name in names} | {
        name: ("agents", key) for name, key in renamed.items()
    }


def make_tanh_normal_actor(
    nested: bool = False, obs: int = 3, act: int = 2
) -> ProbabilisticTensorDictSequential:
    """A TanhNormal policy: observation -> loc, scale -> action in [-1, 1].

    Examples:
        >>> actor = make_tanh_normal_actor()
        >>> actor(TensorDict({"observation": torch.randn(4, 3)}, [4]))["action"].shape
        torch.Size([4, 2])
    """
    net = nn.Sequential(MLP(obs, 2 * act, num_cells=16), NormalParamExtractor())
    keys = [nested_key(nested, "loc"), nested_key(nested, "scale")]
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, [nested_key(nested, "observation")], keys),
        ProbabilisticTensorDictModule(
            dict(zip(["loc", "scale"], keys)),
            [nested_key(nested, "action")],
            distribution_class=TanhNormal,
        ),
    )


def make_categorical_actor(
    nested: bool = False, obs: int = 3, act: int = 2
) -> ProbabilisticTensorDictSequential:
    """A one-hot categorical policy: observation -> logits -> one-hot action.

    Examples:
        >>> actor = make_categorical_actor(act=3)
        >>> actor(TensorDict({"observation": torch.randn(4, 3)}, [4]))["action"].sum(-1)
        tensor([1, 1, 1, 1])
    """
    logits = nested_key(nested, "logits")
    return ProbabilisticTensorDictSequential(
        TensorDictModule(
            MLP(obs, act, num_cells=16), [nested_key(nested, "observation")], [logits]
        ),
        ProbabilisticTensorDictModule(
            {"logits": logits}, [nested_key(nested, "action")], distribution_class=OneHotCategorical
        ),
    )


def make_deterministic_actor(nested: bool = False, obs: int = 3, act: int = 2) -> TensorDictModule:
    """A deterministic policy with a tanh output: observation -> action in [-1, 1].

    Examples:
        >>> actor = make_deterministic_actor()
        >>> actor(TensorDict({"observation": torch.randn(4, 3)}, [4]))["action"].shape
        torch.Size([4, 2])
    """
    net = nn.Sequential(nn.Linear(obs, 16), nn.Tanh(), nn.Linear(16, act), nn.Tanh())
    return TensorDictModule(
        net, [nested_key(nested, "observation")], [nested_key(nested, "action")]
    )


def make_qvalue_critic(nested: bool = False, obs: int = 3, act: int = 2) -> TensorDictModule:
    """A Q(s, a) critic: observation, action -> state_action_value.

    Examples:
        >>> critic = make_qvalue_critic()
        >>> td = TensorDict({"observation": torch.randn(4, 3), "action": torch.randn(4, 2)}, [4])
        >>> critic(td)["state_action_value"].shape
        torch.Size([4, 1])
    """
    keys = [nested_key(nested, "observation"), nested_key(nested, "action")]
    return TensorDictModule(
        MLP(obs + act, 1, num_cells=16), keys, [nested_key(nested, "state_action_value")]
    )


def make_action_value_net(nested: bool = False, obs: int = 3, act: int = 2) -> TensorDictModule:
    """A discrete Q network: observation -> action_value (one entry per action).

    Examples:
        >>> qnet = make_action_value_net(act=4)
        >>> qnet(TensorDict({"observation": torch.randn(5, 3)}, [5]))["action_value"].shape
        torch.Size([5, 4])
    """
    net = MLP(obs, act, num_cells=16)
    return TensorDictModule(
        net, [nested_key(nested, "observation")], [nested_key(nested, "action_value")]
    )


def make_state_value_net(nested: bool = False, obs: int = 3) -> TensorDictModule:
    """A V(s) network: observation -> state_value.

    Examples:
        >>> value = make_state_value_net()
        >>> value(TensorDict({"observation": torch.randn(5, 3)}, [5]))["state_value"].shape
        torch.Size([5, 1])
    """
    net = MLP(obs, 1, num_cells=16)
    return TensorDictModule(
        net, [nested_key(nested, "observation")], [nested_key(nested, "state_value")]
    )


def make_transition_batch(
    nested: bool = False,
    batch: Sequence[int] = (6,),
    *,
    obs: int = 3,
    act: int = 2,
    action: Literal["continuous", "one_hot", "index"] = "continuous",
    bound: float = 1.0,
    agents: int = 2,
) -> TensorDictBase:
    """Random one-step transitions with ``next`` observation, reward, done and terminated.

    Args:
        nested: put every entry under ``"agents"`` with an extra agent dim of size ``agents``.
        batch: the batch size.
        obs: the observation size.
        act: the action size (continuous) or number of actions (discrete).
        action: ``"continuous"`` (uniform in ``[-bound, bound]``), ``"one_hot"`` (float) or
            ``"index"`` (integer, no action dim).
        bound: the continuous action bound.
        agents: the agent dim size when ``nested``.

    Examples:
        >>> td = make_transition_batch(batch=(2, 3), action="index")
        >>> td["action"].shape, td["next", "terminated"].shape
        (torch.Size([2, 3]), torch.Size([2, 3, 1]))
    """
    lead = (*batch, agents) if nested else tuple(batch)
    td = TensorDict({}, batch)
    td.set(nested_key(nested, "observation"), torch.randn(*lead, obs))
    if action == "one_hot":
        td.set(nested_key(nested, "action"), torch.eye(act)[torch.randint(act, lead)])
    elif action == "index":
        td.set(nested_key(nested, "action"), torch.randint(act, lead))
    else:
        td.set(nested_key(nested, "action"), torch.rand(*lead, act) * (2 * bound) - bound)
    nxt = TensorDict({}, batch)
    nxt.set(nested_key(nested, "observation"), torch.randn(*lead, obs))
    nxt.set(nested_key(nested, "reward"), torch.randn(*lead, 1))
    done = torch.rand(*lead, 1) < 0.3
    nxt.set(nested_key(nested, "done"), done)
    nxt.set(nested_key(nested, "terminated"), done & (torch.rand(*lead, 1) < 0.5))
    td.set("next", nxt)
    return td


def perturb_(params: TensorDictBase, scale: float = 0.2) -> TensorDictBase:
    """Add Gaussian noise to every tensor in ``params`` in place (e.g. to tell targets apart).

    Examples:
        >>> params = TensorDict({"w": torch.zeros(3)}, [])
        >>> bool(perturb_(params)["w"].abs().sum() > 0)
        True
    """
    with torch.no_grad():
        return params.apply_(lambda t: t.add_(scale * torch.randn_like(t)))


def bind_stacked(params: TensorDictBase, modules: Sequence[nn.Module]) -> list[nn.Module]:
    """Load slice ``i`` of stacked ensemble ``params`` into ``modules[i]``; returns ``modules``.

    A plain reference can then run each ensemble member (e.g. each target critic) as an
    ordinary module.

    Examples:
        >>> nets = [nn.Linear(2, 1) for _ in range(3)]
        >>> stacked = TensorDict.from_modules(*nets, as_module=False)
        >>> copies = bind_stacked(stacked, [nn.Linear(2, 1) for _ in range(3)])
        >>> bool((copies[2].weight == nets[2].weight).all())
        True
    """
    for i, module in enumerate(modules):
        params[i].to_module(module)
    return list(modules)


class GenericModule(TensorDictModule):
    """A TensorDictModule subclass with its own ``forward``.

    Losses read plain TensorDictModules' weights directly; with this class they must swap
    the weights in instead, so a test can cover that second path.

    Examples:
        >>> net = GenericModule(nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> net(TensorDict({"observation": torch.randn(2, 3)}, [2]))["state_value"].shape
        torch.Size([2, 1])
    """

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        return super().forward(tensordict, *args, **kwargs)

    @classmethod
    def wrap(cls, module: TensorDictModule) -> GenericModule:
        """The same network and keys as ``module``, as a GenericModule.

        Examples:
            >>> GenericModule.wrap(make_state_value_net()).out_keys
            ['state_value']
        """
        return cls(module.module, module.in_keys, module.out_keys)
