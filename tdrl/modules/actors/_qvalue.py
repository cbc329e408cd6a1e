"""QValueModule (argmax over action values, mask-aware) and QValueActor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey
from torch import nn
from torch.nn.functional import one_hot

from tdrl.modules.actors._spec_utils import as_key_list, event_shape, spec_for_key
from tdrl.specs import Categorical, Composite, OneHot, TensorSpec

__all__ = ["QValueActor", "QValueModule"]

# TorchRL's spellings of the action spaces; the last group is TorchRL's but not tdrl's.
_SPACES = {"one_hot": "one_hot", "one-hot": "one_hot", "categorical": "categorical"}
_UNSUPPORTED = {
    "mult_one_hot",
    "mult-one-hot",
    "multi_one_hot",
    "multi-one-hot",
    "binary",
    "multi_categorical",
    "multi-categorical",
    "multi_discrete",
    "multi-discrete",
}
_STRICT = (True, False, None, "auto")


def _resolve_space(action_space: str | None, leaf: TensorSpec | None, where: str) -> str:
    if action_space is None and isinstance(leaf, OneHot):
        return "one_hot"
    if action_space is None and isinstance(leaf, Categorical):
        return "categorical"
    if isinstance(action_space, str) and action_space in _SPACES:
        return _SPACES[action_space]
    if action_space in _UNSUPPORTED:
        raise NotImplementedError(
            f"{where}: the {action_space!r} action space is not supported (got"
            f" action_space={action_space!r}; expected 'one_hot', 'one-hot' or 'categorical')."
            " Use a OneHot or Categorical action spec."
        )
    got = action_space if action_space is not None else f"spec {type(leaf).__name__}"
    raise ValueError(
        f"{where}: cannot tell the action space (got {got!r}; expected 'one_hot', 'one-hot',"
        " 'categorical', or a OneHot/Categorical spec). Pass action_space= or the action spec."
    )


def _check_options(var_nums: int | None, strict_shape: object, where: str) -> None:
    if var_nums is not None:
        raise NotImplementedError(
            f"{where}: var_nums is only for multi-one-hot action spaces, which tdrl does not"
            f" support (got var_nums={var_nums}; expected None). Drop var_nums."
        )
    if strict_shape not in _STRICT:
        raise ValueError(
            f"{where}: unknown strict_shape (got {strict_shape!r}; expected True, False, None or"
            " 'auto'). Pass one of them."
        )


def _as_composite(spec: TensorSpec | None, action_key: NestedKey) -> Composite | None:
    """TorchRL keeps a Q-value module's spec as a Composite keyed by the action key."""
    if spec is None or isinstance(spec, Composite):
        return spec
    return Composite({action_key: spec})


class QValueModule(TensorDictModuleBase):
    """Greedy action from action values: ``argmax`` over the last dim of ``"action_value"``.

    Writes the action (one-hot or index), keeps ``"action_value"`` and writes
    ``"chosen_action_value"`` (the value of the chosen action, shape ``(*batch, 1)``). When the
    data holds ``action_mask_key`` (boolean, True = allowed) masked actions are never chosen,
    whatever their values; a row with no allowed action gives index 0.

    Output format: as in TorchRL, actions are ``torch.int64`` whatever the spec's dtype (a
    ``OneHot`` spec is boolean by default: ``action.argmax(-1)`` works on int64 only). A
    categorical action gets a trailing dim of size 1 when one action of the spec has shape
    ``(1,)`` (the leaf's shape past the dims of the Composite holding it, so a one-agent
    group's ``[*B, 1]`` agent dim is not one). ``spec`` is kept as a ``Composite`` keyed by the
    action key.

    Args:
        action_space: ``"one_hot"`` (or ``"one-hot"``) or ``"categorical"``; inferred from
            ``spec`` when ``None``. TorchRL's multi-one-hot, binary and multi-categorical
            spaces raise ``NotImplementedError``.
        action_value_key: where the action values are read (default ``"action_value"``).
        action_mask_key: optional mask key read when present (``None`` ignores masks). tdrl
            reads ``"action_mask"`` by default (TorchRL: ``None``) so a masked env never gets
            a forbidden greedy action.
        out_keys: ``[action_key, action_value_key, chosen_action_value_key]`` at once, as
            TorchRL spells them.
        var_nums: TorchRL's multi-one-hot sizes; only ``None`` is accepted.
        spec: the action spec (a ``OneHot``/``Categorical`` leaf or a Composite holding
            ``action_key``).
        safe: accepted for TorchRL code; the greedy action always lies in the spec.
        strict_shape: accepted for TorchRL code (``True``, ``False``, ``None``, ``"auto"``);
            a categorical action always takes the spec's trailing size-1 dim when it has one.
        action_key: where the action is written.
        chosen_action_value_key: where the value of the chosen action is written.

    Raises:
        ValueError: the action space is unknown or cannot be inferred, or ``out_keys``
            disagrees with the key arguments.
        NotImplementedError: an action space or ``var_nums`` tdrl does not support.

    Examples:
        >>> import torch
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
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = "action_mask",
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: int | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        strict_shape: bool | str | None = True,
        *,
        action_key: NestedKey = "action",
        chosen_action_value_key: NestedKey = "chosen_action_value",
    ) -> None:
        super().__init__()
        where = "QValueModule.__init__"
        _check_options(var_nums, strict_shape, where)
        if action_value_key is None:
            action_value_key = "action_value"
        if out_keys is not None:
            keys = list(out_keys)
            if len(keys) != 3 or keys[1] != action_value_key:
                raise ValueError(
                    f"{where}: out_keys must be [action, action_value, chosen_action_value] with"
                    f" the action-value key second (got {keys}; expected [..., {action_value_key!r},"
                    " ...]). Pass three keys or use the key arguments."
                )
            action_key, chosen_action_value_key = keys[0], keys[2]
        leaf = spec_for_key(spec, action_key, first=True)
        self.action_space = _resolve_space(action_space, leaf, where)
        self.spec = _as_composite(spec, action_key)
        self.safe, self.strict_shape, self.var_nums = safe, strict_shape, var_nums
        # A trailing size-1 dim of one action (not an agent dim of a one-agent group).
        event = event_shape(spec, action_key, leaf)[-1:] if leaf is not None else ()
        self._unsqueeze = self.action_space == "categorical" and event == (1,)
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
            action = one_hot(index.squeeze(-1), values.shape[-1])
        else:
            action = index if self._unsqueeze else index.squeeze(-1)
        tensordict.set(self.action_key, action)
        tensordict.set(self.chosen_action_value_key, chosen)
        return tensordict


class QValueActor(TensorDictSequential):
    """A value network writing ``"action_value"`` followed by a :class:`QValueModule`.

    Args:
        module: network mapping the ``in_keys`` tensors to one value per action, or a
            ``TensorDictModule`` that already writes ``action_value_key`` (used as it is).
        in_keys: keys read by the network (default ``["observation"]``).
        spec: the action spec; gives the action space (see :class:`QValueModule`).
        safe: see :class:`QValueModule`.
        action_space: ``"one_hot"``, ``"one-hot"`` or ``"categorical"`` when no spec is given.
        action_value_key: where the network writes the action values.
        action_key: where the action is written.
        chosen_action_value_key: where the value of the chosen action is written.
        action_mask_key: mask read when present in the data (``None`` ignores masks).
        strict_shape: see :class:`QValueModule`.

    Raises:
        KeyError: a ``TensorDictModule`` that does not write ``action_value_key``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import OneHot
        >>> actor = QValueActor(torch.nn.Linear(3, 4), spec=OneHot(4))
        >>> td = actor(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))
        >>> td["action"].shape, td["action"].dtype, td["chosen_action_value"].shape
        (torch.Size([2, 4]), torch.int64, torch.Size([2, 1]))
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        safe: bool = False,
        action_space: str | None = None,
        action_value_key: NestedKey | None = None,
        action_key: NestedKey | None = None,
        chosen_action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = "action_mask",
        strict_shape: bool | str | None = True,
    ) -> None:
        value_key = "action_value" if action_value_key is None else action_value_key
        if isinstance(module, TensorDictModuleBase):
            if value_key not in module.out_keys:
                raise KeyError(
                    f"QValueActor.__init__: the module does not write the action values (got"
                    f" out_keys {module.out_keys}; expected {value_key!r} among them). Set"
                    " action_value_key or the module's out_keys."
                )
            net: TensorDictModuleBase = module
        else:
            keys = ["observation"] if in_keys is None else as_key_list(in_keys)
            net = TensorDictModule(module, in_keys=keys, out_keys=[value_key])
        qvalue = QValueModule(
            action_space,
            value_key,
            action_mask_key,
            spec=spec,
            safe=safe,
            strict_shape=strict_shape,
            action_key="action" if action_key is None else action_key,
            chosen_action_value_key=(
                "chosen_action_value"
                if chosen_action_value_key is None
                else chosen_action_value_key
            ),
        )
        super().__init__(net, qvalue)
        self.spec = qvalue.spec
        self.action_space = qvalue.action_space
