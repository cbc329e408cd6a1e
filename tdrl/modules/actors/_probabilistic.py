"""ProbabilisticActor: a network that writes distribution parameters, then a sampler."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModuleBase,
    dispatch,
)
from tensordict.utils import NestedKey

from tdrl.modules.actors._spec_utils import as_key_list, spec_for_key
from tdrl.modules.distributions import Delta
from tdrl.specs import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
)

__all__ = ["ProbabilisticActor"]


def _takes_bounds(distribution_class: type) -> bool:
    try:
        params = inspect.signature(distribution_class).parameters
    except (TypeError, ValueError):
        return False
    return "low" in params and "high" in params


def _bound_value(t: torch.Tensor) -> float | torch.Tensor:
    """A float when every entry agrees (so the bound broadcasts with any batch), else the tensor."""
    flat = t.reshape(-1)
    if flat.numel() and bool((flat == flat[0]).all()):
        return float(flat[0])
    return t


def _dist_kwargs(
    spec: TensorSpec | None,
    key: NestedKey,
    distribution_class: type,
    distribution_kwargs: Mapping[str, Any] | None,
) -> dict[str, Any]:
    kwargs = dict(distribution_kwargs or {})
    leaf = spec_for_key(spec, key, first=True)
    if isinstance(leaf, Bounded) and _takes_bounds(distribution_class):
        kwargs.setdefault("low", _bound_value(leaf.low))
        kwargs.setdefault("high", _bound_value(leaf.high))
    return kwargs


class ProbabilisticActor(ProbabilisticTensorDictSequential):
    """A stochastic policy: ``module`` writes the distribution parameters, then an action is drawn.

    It is a ``tensordict.nn.ProbabilisticTensorDictSequential`` of ``module`` and a
    ``ProbabilisticTensorDictModule`` whose default interaction type is ``RANDOM``: it samples
    unless a :class:`~tdrl.modules.set_exploration_type` block says otherwise
    (``DETERMINISTIC`` gives the distribution's ``deterministic_sample``, ``MODE``/``MEAN`` its
    mode/mean). ``get_dist(td)`` returns the distribution and ``log_prob(td)`` scores the action
    of ``td``.

    Spec: when the action spec is ``Bounded`` and ``distribution_class`` takes ``low`` and
    ``high`` keyword arguments (``TanhNormal``, ``TruncatedNormal``, ``TanhDelta``), they default
    to the spec's bounds, so samples stay inside the spec. Bounds that are equal everywhere are
    passed as floats; per-dim bounds as tensors of the spec shape (pass an un-batched spec then).
    The sample itself is not projected: its log-probability must stay that of the drawn value.
    With a one-hot or categorical spec, the sample (floats for one-hot distributions) is cast
    to the spec's dtype (e.g. ``torch.bool`` one-hot actions).

    Args:
        module: a TensorDict module writing the distribution parameters (e.g. ``loc``/``scale``).
        in_keys: the parameter keys read by the distribution: a list (key names are the
            distribution's keyword names) or a dict ``{kwarg: key}``.
        distribution_class: the distribution type (e.g. :class:`~tdrl.modules.TanhNormal`);
            default :class:`~tdrl.modules.Delta` (as in TorchRL): the action is the ``param``
            entry itself.
        spec: optional spec of the action (a leaf spec, or a Composite holding the action key).
        out_keys: where the sample is written (default ``["action"]``).
        return_log_prob: also write the log-probability of the sample.
        log_prob_key: where the log-probability goes (one out key only); default
            ``"<out_key>_log_prob"``, i.e. ``"action_log_prob"``. Several out keys (a composite
            distribution) use tensordict's per-key ``"<key>_log_prob"`` entries.
        distribution_kwargs: extra keyword arguments of the distribution.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import MLP, NormalParamExtractor, TanhNormal
        >>> from tdrl.specs import Bounded
        >>> net = torch.nn.Sequential(MLP(out_features=4, num_cells=8), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"],
        ...     distribution_class=TanhNormal,
        ...     spec=Bounded(-2.0, 2.0, shape=(2,)),
        ...     return_log_prob=True,
        ... )
        >>> td = actor(TensorDict(observation=torch.zeros(5, 3), batch_size=[5]))
        >>> td["action"].shape, td["action_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5]))
    """

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[str, NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        distribution_class: type = Delta,
        spec: TensorSpec | None = None,
        return_log_prob: bool = False,
        log_prob_key: NestedKey | None = None,
        distribution_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        outs = ["action"] if out_keys is None else as_key_list(out_keys)
        dist_in: Any = dict(in_keys) if isinstance(in_keys, Mapping) else as_key_list(in_keys)
        lp: dict[str, Any] = {}
        if len(outs) == 1:
            lp["log_prob_key"] = log_prob_key if log_prob_key is not None else _suffixed(outs[0])
        sampler = ProbabilisticTensorDictModule(
            in_keys=dist_in,
            out_keys=outs,
            default_interaction_type=InteractionType.RANDOM,
            distribution_class=distribution_class,
            distribution_kwargs=_dist_kwargs(
                spec, outs[0], distribution_class, distribution_kwargs
            ),
            return_log_prob=return_log_prob,
            **lp,
        )
        super().__init__(module, sampler)
        self.spec = spec
        self._cast = _discrete_dtype(spec, outs[0]) if len(outs) == 1 else None
        self._action_key = outs[0]

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs the module and samples; discrete samples are cast to the spec's dtype."""
        out = super().forward(tensordict, *args, **kwargs)
        if self._cast is not None:
            action = out.get(self._action_key)
            if action.dtype != self._cast:
                out.set(self._action_key, action.to(self._cast))
        return out


def _discrete_dtype(spec: TensorSpec | None, key: NestedKey) -> torch.dtype | None:
    """The dtype of a one-hot/categorical action spec (samples come out as floats)."""
    if spec is None:
        return None
    leaf = spec.get(key, None) if isinstance(spec, Composite) else spec
    if isinstance(leaf, OneHot | Categorical | MultiOneHot | MultiCategorical):
        return leaf.dtype
    return None


def _suffixed(key: NestedKey) -> NestedKey:
    if isinstance(key, str):
        return f"{key}_log_prob"
    return (*key[:-1], f"{key[-1]}_log_prob")
