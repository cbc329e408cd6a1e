"""QEnsemble: several copies of a tensordict module evaluated in one vectorised call."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn
from torch.nn.parameter import UninitializedParameter

from tdrl.objectives._utils import (
    batch_mean,
    distance,
    get_entry,
    input_tensors,
    per_sample,
    plain_layers,
    run_layers,
)

__all__ = ["QEnsemble"]


class QEnsemble(nn.Module):
    """``num_copies`` copies of a tensordict module with stacked parameters, run in one call.

    The parameters (and buffers) of the copies are stacked along a new leading dim into
    :attr:`params`, a ``TensorDictParams`` of batch size ``[num_copies]``: they are this
    module's trainable parameters. The module itself is kept without parameters (on the
    ``meta`` device) and receives each copy's parameters through ``torch.vmap`` when called,
    so the ensemble costs one batched call instead of a Python loop over networks. A plain
    ``TensorDictModule`` (no hooks) around an :class:`~tdrl.modules.MLP` (or an
    ``nn.Sequential`` with one input) of ``nn.Linear`` and parameter-free layers skips vmap:
    its layers run as batched matrix products (``baddbmm``) on the stacked weights directly.

    A loss keeps a target of the ensemble with ``LossModule._make_target(name)``: the target
    is ``loss.<name>_target_params["params"]``, passed back as ``params=``.

    The module must not update buffers in place (e.g. ``BatchNorm`` in training mode).
    Dropout draws different masks for each copy.

    Args:
        module: a tensordict module (e.g. reading ``"observation"`` and ``"action"``, writing
            ``"state_action_value"``), or a sequence of such modules with the same structure
            whose weights are used as they are.
        num_copies: the ensemble size when a single module is given: copy 0 keeps the
            module's weights, the others are re-initialised with the ``reset_parameters()`` of
            its submodules.

    Raises:
        ValueError: a bad ``num_copies``, modules of different structures, lazy modules that
            were never run, or copies that cannot be re-initialised.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> net = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> ensemble = QEnsemble(net, num_copies=4)
        >>> td = TensorDict(observation=torch.randn(5, 3), batch_size=[5])
        >>> ensemble(td).shape
        torch.Size([4, 5, 1])
        >>> ensemble(td, params=ensemble.params[0]).shape  # one copy, no ensemble dim
        torch.Size([5, 1])
    """

    def __init__(
        self,
        module: TensorDictModuleBase | Sequence[TensorDictModuleBase],
        num_copies: int | None = None,
    ) -> None:
        super().__init__()
        copies = _copies(module, num_copies)
        for member in copies:
            if any(isinstance(p, UninitializedParameter) for p in member.parameters()):
                raise ValueError(
                    "QEnsemble.__init__: the module has uninitialised (lazy) parameters (got "
                    "a lazy layer; expected materialised weights). Run it once on a batch first."
                )
        try:
            self.params = TensorDict.from_modules(*copies, as_module=True)
        except Exception as err:
            raise ValueError(
                f"QEnsemble.__init__: the modules do not have the same parameters (got {err}; "
                "expected copies of one architecture). Pass modules built the same way."
            ) from None
        base: Any = copy.deepcopy(copies[0])
        self.params[0].data.to("meta").to_module(base)
        # Kept out of the submodules: the base has no weights of its own (see the docstring).
        self._base = [base]
        self._layers = plain_layers(base)
        self.in_keys: list[NestedKey] = list(base.in_keys)
        self.out_keys: list[NestedKey] = list(base.out_keys)

    @property
    def num_copies(self) -> int:
        """The ensemble size."""
        return int(self.params.batch_size[0])

    def forward(
        self,
        tensordict: TensorDictBase,
        params: TensorDictBase | None = None,
        *,
        out_key: NestedKey | None = None,
        detach: bool = False,
        member: int | None = None,
        replace: Mapping[NestedKey, Tensor] | None = None,
    ) -> Tensor:
        """Evaluates every copy on ``tensordict`` (which is not modified).

        Args:
            tensordict: holds the module's ``in_keys``.
            params: stacked parameters (default :attr:`params`; a target or a detached or
                indexed version of it); without a leading ensemble dim, one copy is run.
            out_key: the output entry returned (default the module's first out key).
            detach: run on ``params.detach()`` (no gradient reaches the parameters; the
                inputs still get theirs). A plain MLP detaches each weight as it is read.
            member: run only this copy (``params[member]``; no ensemble dim in the output).
            replace: input entries read from here instead of ``tensordict`` (e.g. the
                policy's action), as if they were set in a copy of it.

        Returns:
            ``[num_copies, *batch, *value_shape]`` (``[*batch, *value_shape]`` for one copy).
        """
        params = self.params if params is None else params
        key = self.out_keys[0] if out_key is None else out_key
        tensors = input_tensors(tensordict, self.in_keys, replace, "QEnsemble.forward")
        if self._layers is not None and key == self.out_keys[0]:
            return run_layers(self._layers, tensors, params, detach, member)
        if detach:
            params = params.detach()
        if member is not None:
            params = params[member]
        base = self._base[0]
        inputs = tensordict.empty()
        for in_key, tensor in zip(self.in_keys, tensors, strict=True):
            inputs.set(in_key, tensor)

        def call(p: TensorDictBase) -> Tensor:
            with p.to_module(base):
                out = base(inputs.copy())
            return get_entry(out, key, "QEnsemble.forward")

        if params.batch_dims == 0:
            return call(params)
        return torch.vmap(call, (0,), randomness="different")(params)


def _copies(
    module: TensorDictModuleBase | Sequence[TensorDictModuleBase], num_copies: int | None
) -> list[nn.Module]:
    if isinstance(module, Sequence):
        given: list[nn.Module] = list(module)
        if not given or (num_copies is not None and num_copies != len(given)):
            raise ValueError(
                f"QEnsemble.__init__: num_copies does not match the modules (got {num_copies} "
                f"for {len(given)} modules; expected None or their number)."
            )
        return given
    if num_copies is None or num_copies < 1:
        raise ValueError(
            f"QEnsemble.__init__: num_copies must be a positive int (got {num_copies!r}; "
            "expected e.g. 2). Pass num_copies= or a list of modules."
        )
    members: list[nn.Module] = [module]
    for _ in range(num_copies - 1):
        clone = copy.deepcopy(module)
        resettable = [m for m in clone.modules() if callable(getattr(m, "reset_parameters", None))]
        if not resettable and any(True for _ in clone.parameters()):
            raise ValueError(
                f"QEnsemble.__init__: cannot re-initialise copies of {type(module).__name__} "
                "(got no submodule with reset_parameters(); expected e.g. nn.Linear layers). "
                "Pass a list of independently initialised modules instead."
            )
        with torch.no_grad():
            for m in resettable:
                m.reset_parameters()  # type: ignore[operator]
        members.append(clone)
    return members


def ensemble_target(loss: nn.Module, name: str = "qvalue_network") -> TensorDictBase:
    """The stacked target parameters of the ensemble ``name`` of ``loss``.

    A loss built without a target gets the live parameters, detached.
    """
    target = getattr(loss, f"{name}_target_params", None)
    if target is None:
        return getattr(loss, name).params.detach()
    return target["params"]


def ensemble_distance(
    pred: Tensor,
    target: Tensor,
    loss_function: str,
    td: TensorDictBase,
    weight_key: NestedKey | None = None,
    members: str = "sum",
    squared: bool = True,
    owner: Any = None,
) -> tuple[Tensor, Tensor]:
    """Regression of every member on one target.

    Args:
        pred: ``[num_copies, *batch, *F]`` predictions.
        target: ``[*batch, *F]``, detached.
        loss_function: see :func:`tdrl.objectives.distance_loss`.
        td: the batch (its batch dims; the TD error is averaged over the other dims).
        weight_key: the per-sample weights in ``td`` (see ``batch_mean``), or None.
        members: ``"sum"`` (TorchRL's SAC, TD3, IQL, CQL) or ``"mean"`` (TorchRL's REDQ) of
            the members' losses.
        squared: the TD error is the squared error (TorchRL's TD3, IQL, CQL, REDQ) rather than
            the absolute one (TorchRL's SAC).
        owner: the loss module whose validity masks (``loss_mask_key``) restrict the mean.

    Returns:
        ``(loss, td_error)``: the sum (or mean) over members of their mean distance, and the
        largest (squared or absolute) error among the members per sample (shape ``batch``).
    """
    per_member = distance(pred, target, loss_function)
    combined = per_member.sum(0) if members == "sum" else per_member.mean(0)
    loss = batch_mean(combined, td, weight_key, owner)
    td_error = per_sample((pred.detach() - target).abs().amax(0), td.batch_dims, squared)
    return loss, td_error
