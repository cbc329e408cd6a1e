"""Actor (deterministic policy) and ValueOperator: TensorDictModules with RL default keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, dispatch
from tensordict.utils import NestedKey
from torch import nn

from tdrl.modules.actors._spec_utils import as_key_list, spec_for_key
from tdrl.specs import TensorSpec

__all__ = ["Actor", "ValueOperator"]


class Actor(TensorDictModule):
    """A deterministic policy: reads observations, writes the action.

    With a ``spec`` the outputs are kept inside it with ``spec.project`` (a ``Bounded`` spec
    clamps, a ``Categorical`` spec rounds and clamps, ...). ``spec`` is a leaf spec, which
    describes the first out key (the action), or a ``Composite`` holding specs for any of the
    out keys (the others are left as they are).

    Args:
        module: the network; called with the ``in_keys`` tensors in order.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["action"]``).
        spec: optional spec of the outputs.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded
        >>> actor = Actor(torch.nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)))
        >>> td = actor(TensorDict(observation=torch.full((4, 3), 10.0), batch_size=[4]))
        >>> bool(td["action"].abs().max() <= 1.0)
        True
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
    ) -> None:
        ins = ["observation"] if in_keys is None else as_key_list(in_keys)
        outs = ["action"] if out_keys is None else as_key_list(out_keys)
        super().__init__(module, in_keys=ins, out_keys=outs)
        self.spec = spec
        self._projections = [
            (key, leaf)
            for i, key in enumerate(self.out_keys)
            if (leaf := spec_for_key(spec, key, first=i == 0)) is not None
        ]

    @dispatch(auto_batch_size=False)
    def forward(
        self,
        tensordict: TensorDictBase,
        *args: Any,
        tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        """Runs the module, then projects the outputs that have a spec."""
        out = super().forward(tensordict, *args, tensordict_out=tensordict_out, **kwargs)
        for key, leaf in self._projections:
            out.set(key, leaf.project(out.get(key)))
        return out


class ValueOperator(TensorDictModule):
    """A value network: writes ``"state_value"``, or ``"state_action_value"`` when it reads
    ``"action"``.

    Args:
        module: the network; called with the ``in_keys`` tensors in order (an
            :class:`~tdrl.modules.MLP` concatenates them).
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written; by default ``["state_action_value"]`` if ``"action"`` is among
            the in keys, else ``["state_value"]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.modules import MLP
        >>> q = ValueOperator(MLP(out_features=1, num_cells=8), in_keys=["observation", "action"])
        >>> td = TensorDict(observation=torch.zeros(4, 3), action=torch.zeros(4, 2), batch_size=[4])
        >>> q(td)["state_action_value"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        keys = ["observation"] if in_keys is None else as_key_list(in_keys)
        if out_keys is None:
            out_keys = ["state_action_value"] if "action" in keys else ["state_value"]
        super().__init__(module, in_keys=keys, out_keys=as_key_list(out_keys))
