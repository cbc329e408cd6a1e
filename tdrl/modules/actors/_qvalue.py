"""QValueModule (argmax over action values, mask-aware) and QValueActor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey
from torch import nn
from torch.nn.functional import one_hot

from tdrl.modules.actors._spec_utils import as_key_list, spec_for_key
from tdrl.specs import Categorical, OneHot, TensorSpec

__all__ = ["QValueActor", "QValueModule"]

_SPACES = ("one_hot", "categorical")


def _resolve_space(action_space: str | None, leaf: TensorSpec | None, where: str) -> str:
    if action_space is None and isinstance(leaf, OneHot):
        return "one_hot"
    if action_space is None and isinstance(leaf, Categorical):
        return "categorical"
    if action_space in _SPACES:
        return action_space
    got = action_space if action_space is not None else f"spec {type(leaf).__name__}"
    raise ValueError(
        f"{where}: cannot tell the action space (got {got!r}; expected 'one_hot', 'categorical',"
        " or a OneHot/Categorical spec). Pass action_space= or the env's action spec."
    )


class QValueModule(TensorDictModuleBase):
    """Greedy action from action values: ``argmax`` over the last dim of ``"action_value"``.

    Writes the action (one-hot or index), keeps ``"action_value"`` and writes
    ``"chosen_action_value"`` (the value of the chosen action, shape ``(*batch, 1)``). When the
    data holds ``action_mask_key`` (boolean, True = allowed) masked actions are never chosen,
    whatever their values; a row with no allowed action gives index 0.

    Output format: a one-hot action has the spec's dtype (``torch.bool`` without a spec); a
    categorical action has the spec's dtype (``torch.int64`` without a spec) and gets a trailing
    dim of size 1 when the spec shape ends with 1.

    Args:
        action_space: ``"one_hot"`` or ``"categorical"``; inferred from ``spec`` when ``None``.
        spec: the action spec (a ``OneHot``/``Categorical`` leaf or a Composite holding
            ``action_key``).
        action_key: where the action is written.
        action_value_key: where the action values are read.
        chosen_action_value_key: where the value of the chosen action is written.
        action_mask_key: optional mask key read when present (``None`` ignores masks).

    Raises:
        ValueError: the action space is unknown or cannot be inferred.

    Examples:
        >>> from tensordict import TensorDict
        >>> qv = QValueModule("categorical")
        >>> td = TensorDict(
        ...     action_value=torch.tensor([[1.0, 9.0, 2.0]]),
        ...     action_mask=torch.tensor([[True, False, True]]),
        ...     batch_size=[1],
        ... )
        >>> out = qv(td)
        >>> out["action"].tolist(), out["chosen_action_value"].tolist()
        ([2], [[2.0]])
    """

    def __init__(
        self,
        action_space: str | None = None,
        *,
        spec: TensorSpec | None = None,
        action_key: NestedKey = "action",
        action_value_key: NestedKey = "action_value",
        chosen_action_value_key: NestedKey = "chosen_action_value",
        action_mask_key: NestedKey | None = "action_mask",
    ) -> None:
        super().__init__()
        leaf = spec_for_key(spec, action_key, first=True)
        self.action_space = _resolve_space(action_space, leaf, "QValueModule.__init__")
        self.spec = spec
        default = torch.bool if self.action_space == "one_hot" else torch.int64
        self._dtype = leaf.dtype if leaf is not None and leaf.dtype is not None else default
        self._unsqueeze = (
            self.action_space == "categorical" and leaf is not None and leaf.shape[-1:] == (1,)
        )
        self.action_key = action_key
        self.action_value_key = action_value_key
        self.chosen_action_value_key = chosen_action_value_key
        self.action_mask_key = action_mask_key
        self.in_keys = cast(list[Any], [action_value_key])
        self.out_keys = cast(list[Any], [action_key, action_value_key, chosen_action_value_key])

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the greedy (allowed) action and its value into ``tensordict``."""
        values = tensordict.get(self.action_value_key)
        scores = values
        if self.action_mask_key is not None:
            mask = tensordict.get(self.action_mask_key, None)
            if mask is not None:
                scores = values.masked_fill(~mask.bool(), float("-inf"))
        index = scores.argmax(-1, keepdim=True)
        chosen = values.gather(-1, index)
        if self.action_space == "one_hot":
            action = one_hot(index.squeeze(-1), values.shape[-1]).to(self._dtype)
        else:
            action = (index if self._unsqueeze else index.squeeze(-1)).to(self._dtype)
        tensordict.set(self.action_key, action)
        tensordict.set(self.chosen_action_value_key, chosen)
        return tensordict


class QValueActor(TensorDictSequential):
    """A value network writing ``"action_value"`` followed by a :class:`QValueModule`.

    Args:
        module: network mapping the ``in_keys`` tensors to one value per action.
        in_keys: keys read by the network (default ``["observation"]``).
        spec: the action spec; gives the action space and dtype (see :class:`QValueModule`).
        action_space: ``"one_hot"`` or ``"categorical"`` when no spec is given.
        action_key: where the action is written.
        action_value_key: where the network writes the action values.
        action_mask_key: mask read when present in the data (``None`` ignores masks).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import OneHot
        >>> actor = QValueActor(torch.nn.Linear(3, 4), spec=OneHot(4))
        >>> td = actor(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))
        >>> td["action"].shape, td["action"].dtype, td["chosen_action_value"].shape
        (torch.Size([2, 4]), torch.bool, torch.Size([2, 1]))
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] = ("observation",),
        *,
        spec: TensorSpec | None = None,
        action_space: str | None = None,
        action_key: NestedKey = "action",
        action_value_key: NestedKey = "action_value",
        action_mask_key: NestedKey | None = "action_mask",
    ) -> None:
        net = TensorDictModule(module, in_keys=as_key_list(in_keys), out_keys=[action_value_key])
        qvalue = QValueModule(
            action_space,
            spec=spec,
            action_key=action_key,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
        )
        super().__init__(net, qvalue)
        self.spec = spec
