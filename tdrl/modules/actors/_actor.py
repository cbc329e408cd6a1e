"""Actor (deterministic policy) and ValueOperator: TensorDictModules with RL default keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensordict.nn import TensorDictModule
from tensordict.utils import NestedKey
from torch import nn

from tdrl.modules.actors._safe import SafeModule
from tdrl.modules.actors._spec_utils import as_key_list
from tdrl.specs import Composite, TensorSpec

__all__ = ["Actor", "ValueOperator"]


class Actor(SafeModule):
    """A deterministic policy: reads observations, writes the action.

    A :class:`SafeModule` with RL default keys. As in TorchRL, ``spec`` describes the
    outputs (a leaf spec is the spec of ``"action"`` when it is among the out keys, else of the
    single out key; ``actor.spec`` is always a ``Composite``), and outputs are only mapped into
    it (``spec.project``: a ``Bounded`` spec clamps) with ``safe=True``.

    Args:
        module: the network; called with the ``in_keys`` tensors in order.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["action"]``).
        spec: optional spec of the outputs.
        safe: project the outputs that have a spec into it (default ``False``, as TorchRL).
        inplace: ``tensordict.nn.TensorDictModule``'s ``inplace``.
        **kwargs: the other options of ``tensordict.nn.TensorDictModule`` (``out_to_in_map``,
            ``method``, ``method_kwargs``, ``strict``, ``get_kwargs``), as TorchRL forwards
            them; an unknown name raises ``TypeError``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded
        >>> spec = Bounded(-1.0, 1.0, shape=(2,))
        >>> td = TensorDict(observation=torch.full((4, 3), 10.0), batch_size=[4])
        >>> actor = Actor(torch.nn.Linear(3, 2), spec=spec, safe=True)
        >>> bool(actor(td)["action"].abs().max() <= 1.0)
        True
        >>> list(actor.spec.keys())
        ['action']
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        safe: bool = False,
        inplace: bool | str = True,
        **kwargs: Any,
    ) -> None:
        ins = ["observation"] if in_keys is None else as_key_list(in_keys)
        outs = ["action"] if out_keys is None else as_key_list(out_keys)
        if spec is not None and not isinstance(spec, Composite) and "action" in outs:
            spec = Composite(action=spec)
        super().__init__(module, ins, outs, spec=spec, safe=safe, inplace=inplace, **kwargs)


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
