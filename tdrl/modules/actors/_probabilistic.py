"""ProbabilisticActor: a network that writes distribution parameters, then a sampler."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModuleBase,
    dispatch,
)
from tensordict.utils import NestedKey

from tdrl.modules.actors._safe import check_safe, output_spec, project_outputs, projections
from tdrl.modules.actors._spec_utils import as_key_list, spec_for_key
from tdrl.modules.distributions import Delta
from tdrl.specs import Bounded, Composite, TensorSpec

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
    leaf: TensorSpec | None,
    distribution_class: type,
    distribution_kwargs: Mapping[str, Any] | None,
) -> dict[str, Any]:
    kwargs = dict(distribution_kwargs or {})
    if isinstance(leaf, Bounded) and _takes_bounds(distribution_class):
        kwargs.setdefault("low", _bound_value(leaf.low))
        kwargs.setdefault("high", _bound_value(leaf.high))
    return kwargs


class ProbabilisticActor(ProbabilisticTensorDictSequential):
    """A stochastic policy: ``module`` writes the distribution parameters, then an action is drawn.

    It is a ``tensordict.nn.ProbabilisticTensorDictSequential`` of ``module`` and a
    ``ProbabilisticTensorDictModule``. As in TorchRL, the value it writes follows the
    exploration type of the enclosing :class:`~tdrl.modules.set_exploration_type` block
    (``RANDOM`` samples, ``DETERMINISTIC`` gives the distribution's ``deterministic_sample``,
    ``MODE``/``MEDIAN``/``MEAN`` its mode/median/mean); outside any block it follows
    ``default_interaction_type``, ``DETERMINISTIC`` by default. Collectors run the policy
    under ``RANDOM`` (their ``exploration_type``), so they sample; a plain ``actor(td)`` or
    ``env.rollout(n, actor)`` outside a block does not. ``get_dist(td)`` returns the
    distribution and ``log_prob(td)`` scores the action of ``td``.

    Spec: ``spec`` is kept as a ``Composite`` keyed by the out key (TorchRL's
    ``actor.spec["action"]``). When the action spec is ``Bounded`` and ``distribution_class``
    takes ``low`` and ``high`` keyword arguments (``TanhNormal``, ``TruncatedNormal``,
    ``TanhDelta``), they default to the spec's bounds, so samples stay inside the spec.
    Bounds that are equal everywhere are passed as floats; per-dim bounds as tensors of the
    spec shape (pass an un-batched spec then). With ``safe=True`` the written value is also
    mapped into the spec (``spec.project``) after sampling; its log-probability stays that of
    the drawn value. As in TorchRL, the action keeps the distribution's dtype (int64 for the
    one-hot and categorical distributions), whatever the spec's dtype.

    A ``tensordict.nn.CompositeDistribution`` with no ``out_keys`` writes the keys of its
    ``name_map`` (else of its ``distribution_map``), and ``out_keys`` lists them, as TorchRL.

    Args:
        module: a TensorDict module writing the distribution parameters (e.g. ``loc``/``scale``).
        in_keys: the parameter keys read by the distribution: a list (key names are the
            distribution's keyword names) or a dict ``{kwarg: key}``.
        out_keys: where the sample is written (default ``["action"]``, or the composite
            distribution's leaf keys).
        spec: optional spec of the action (a leaf spec, or a Composite keyed by out key).
        safe: project the written value into ``spec`` (default ``False``).
        default_interaction_type: the exploration type used outside any
            ``set_exploration_type`` block: an ``ExplorationType`` or
            ``tensordict.nn.InteractionType`` member, or its name in any case (default
            ``"deterministic"``).
        distribution_class: the distribution type (e.g. :class:`~tdrl.modules.TanhNormal`);
            default :class:`~tdrl.modules.Delta` (as in TorchRL): the action is the ``param``
            entry itself.
        distribution_kwargs: extra keyword arguments of the distribution.
        return_log_prob: also write the log-probability of the sample.
        log_prob_keys: the log-probability keys of a composite distribution (tensordict's).
        log_prob_key: where the log-probability goes (one out key only); default
            ``"<out_key>_log_prob"``, i.e. ``"action_log_prob"``. Several out keys (a composite
            distribution) use tensordict's per-key ``"<key>_log_prob"`` entries.
        cache_dist: tensordict's option: keep the distribution parameters with the sample.
        n_empirical_estimate: samples averaged for ``MEAN`` when the distribution has no mean.
        num_samples: draw this many samples at once (a leading sample dim).
        generator: a ``torch.Generator`` (or a seed) to draw the samples from.

    Raises:
        ValueError: an unknown ``default_interaction_type``, a leaf spec for several out keys,
            or ``safe=True`` without a spec.
        KeyError: a ``CompositeDistribution`` without ``distribution_map`` and no out keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import (
        ...     MLP, ExplorationType, NormalParamExtractor, TanhNormal, set_exploration_type,
        ... )
        >>> from tdrl.specs import Bounded
        >>> net = torch.nn.Sequential(MLP(out_features=4, num_cells=8), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"],
        ...     distribution_class=TanhNormal,
        ...     spec=Bounded(-2.0, 2.0, shape=(2,)),
        ...     return_log_prob=True,
        ... )
        >>> td = TensorDict(observation=torch.zeros(5, 3), batch_size=[5])
        >>> torch.equal(actor(td.clone())["action"], actor(td.clone())["action"])
        True
        >>> with set_exploration_type(ExplorationType.RANDOM):
        ...     out = actor(td.clone())
        >>> out["action"].shape, out["action_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5]))
    """

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping[str, NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        safe: bool = False,
        default_interaction_type: Any = InteractionType.DETERMINISTIC,
        distribution_class: type = Delta,
        distribution_kwargs: Mapping[str, Any] | None = None,
        return_log_prob: bool = False,
        log_prob_keys: Sequence[NestedKey] | None = None,
        log_prob_key: NestedKey | None = None,
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
        num_samples: int | torch.Size | None = None,
        generator: torch.Generator | int | NestedKey | None = None,
    ) -> None:
        where = "ProbabilisticActor.__init__"
        outs = _default_out_keys(distribution_class, distribution_kwargs, where)
        if out_keys is not None:
            outs = as_key_list(out_keys)
        dist_in: Any = dict(in_keys) if isinstance(in_keys, Mapping) else as_key_list(in_keys)
        lp: dict[str, Any] = {}
        if len(outs) == 1:
            lp["log_prob_key"] = log_prob_key if log_prob_key is not None else _suffixed(outs[0])
        elif log_prob_key is not None:
            lp["log_prob_key"] = log_prob_key
        full_spec = output_spec(spec, outs, where)
        check_safe(safe, full_spec, where)
        leaf = spec_for_key(full_spec, outs[0], first=True)
        sampler = ProbabilisticTensorDictModule(
            in_keys=dist_in,
            out_keys=outs,
            default_interaction_type=as_interaction_type(default_interaction_type, where),
            distribution_class=distribution_class,
            distribution_kwargs=_dist_kwargs(leaf, distribution_class, distribution_kwargs),
            return_log_prob=return_log_prob,
            log_prob_keys=None if log_prob_keys is None else list(log_prob_keys),
            cache_dist=cache_dist,
            n_empirical_estimate=n_empirical_estimate,
            num_samples=num_samples,
            generator=generator,
            **lp,
        )
        super().__init__(module, sampler)
        self._spec = full_spec
        self.safe = safe
        self._projections = projections(full_spec) if safe else []

    @property
    def spec(self) -> Composite:
        """The spec of the action, keyed by out key (empty when none was given)."""
        return self._spec

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs the module and draws the action (see the class docstring for the rules)."""
        out = super().forward(tensordict, *args, **kwargs)
        if self._projections:
            project_outputs(out, self._projections)
        return out


def as_interaction_type(value: Any, where: str) -> InteractionType:
    """An ``InteractionType`` from one of its members, an ``ExplorationType`` or a name."""
    if isinstance(value, InteractionType):
        return value
    name = value.value if isinstance(value, enum.Enum) else value
    if isinstance(name, str):
        try:
            return InteractionType(name.lower())
        except ValueError:
            pass
    allowed = ", ".join(repr(t.value) for t in InteractionType)
    raise ValueError(
        f"{where}: unknown default_interaction_type (got {value!r}; expected an ExplorationType"
        f" or InteractionType member, or one of {allowed}). Pass e.g."
        " ExplorationType.RANDOM."
    )


def _default_out_keys(
    distribution_class: type, distribution_kwargs: Mapping[str, Any] | None, where: str
) -> list[NestedKey]:
    """``["action"]``, or the leaf keys a ``CompositeDistribution`` writes (TorchRL's rule)."""
    if distribution_class is not CompositeDistribution:
        return ["action"]
    kwargs = distribution_kwargs or {}
    if "distribution_map" not in kwargs:
        raise KeyError(
            f"{where}: a CompositeDistribution needs distribution_kwargs['distribution_map']"
            f" (got keys {sorted(kwargs)}; expected 'distribution_map'). Pass the map of"
            " distribution classes, or out_keys."
        )
    name_map = kwargs.get("name_map")
    return list(name_map.values()) if name_map is not None else list(kwargs["distribution_map"])


def _suffixed(key: NestedKey) -> NestedKey:
    if isinstance(key, str):
        return f"{key}_log_prob"
    return (*key[:-1], f"{key[-1]}_log_prob")
