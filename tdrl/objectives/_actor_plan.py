"""A policy's distribution built straight from tensors, for the losses' hot path.

``actor.get_dist(td)`` of a ``ProbabilisticActor`` goes through tensordict.nn's dispatch: it
reads the inputs, writes the distribution parameters into ``td``, walks the module tree to
find the probabilistic module, and builds the distribution from the entries. For the common
policy (one plain ``TensorDictModule`` writing the parameters, then one
``ProbabilisticTensorDictModule``) that costs more than the network itself at classic-control
sizes. :func:`actor_plan` recognises that shape once; :func:`policy_dist_acted` then calls the
network on the input tensors and passes its outputs to the distribution class directly: the
same calls with the same tensors, so the distribution is the same (the tests compare samples,
log-probabilities and gradients of both paths). Any other policy gets ``get_dist``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from tensordict.utils import NestedKey
from torch import Tensor, nn

__all__: list[str] = []


@dataclass(frozen=True)
class ActorPlan:
    """``distribution_class(**{names[i]: net(*in_keys)[i]}, **kwargs)``."""

    net: nn.Module
    in_keys: tuple[NestedKey, ...]
    names: tuple[str, ...]  # the distribution's keyword for each output of ``net``
    out_keys: tuple[NestedKey, ...]  # where the tensordict module writes each output
    distribution_class: Any
    kwargs: dict[str, Any]
    guards: tuple[nn.Module, ...]  # the modules the plan skips: a hook on one disables it


def actor_plan(actor: Any) -> ActorPlan | None:
    """The plan of a plain two-module policy, or None (then ``actor.get_dist`` is used)."""
    if not isinstance(actor, ProbabilisticTensorDictSequential) or actor.return_composite:
        return None
    if type(actor).get_dist is not ProbabilisticTensorDictSequential.get_dist:
        return None
    modules = list(actor.module)
    if len(modules) != 2 or any(has_hooks(m) for m in actor.modules()):
        return None
    det, prob = modules
    if not (_plain_module(det) and _plain_probabilistic(prob)):
        return None
    produced = list(det.out_keys)
    names: list[str | None] = [None] * len(produced)
    for dist_key, in_key in zip(prob.dist_keys, prob.in_keys, strict=True):
        if in_key not in produced or names[produced.index(in_key)] is not None:
            return None  # a parameter read from the batch, or one output used twice
        names[produced.index(in_key)] = dist_key[-1] if isinstance(dist_key, tuple) else dist_key
    if any(name is None for name in names):
        return None
    return ActorPlan(
        net=det.module,
        in_keys=tuple(det.in_keys),
        names=tuple(str(n) for n in names),
        out_keys=tuple(produced),
        distribution_class=prob.distribution_class,
        kwargs=dict(prob.distribution_kwargs),
        guards=(actor, det, prob),
    )


_PLANS: WeakKeyDictionary[nn.Module, ActorPlan | None] = WeakKeyDictionary()


def policy_dist_acted(
    actor: Any, td: TensorDictBase
) -> tuple[Any, TensorDictBase, dict[NestedKey, Tensor]]:
    """``(dist, td to read, replace)``: ``actor.get_dist``, and where its parameters are.

    The plan of ``actor`` is found on its first use and kept (weakly) with it; a hook
    registered on the policy's own modules later sends every call back to ``get_dist``. The
    distribution is typed ``Any`` as ``get_dist``'s: a policy may return any
    distribution-like object (a composite one, a class with ``logits``), used duck-typed.

    What ``actor.get_dist`` on a copy of ``td`` gives and writes into the copy: a plain policy
    leaves ``td`` as it is and returns its outputs in ``replace`` (keyed by its out keys, for
    the critics' ``replace=``); any other policy writes into a copy of ``td``, returned.
    """
    plan = _usable_plan(actor)
    outs = None if plan is None else _outputs(plan, td)
    if plan is None or outs is None:
        td = td.copy()
        return actor.get_dist(td), td, {}
    dist = plan.distribution_class(**dict(zip(plan.names, outs, strict=True)), **plan.kwargs)
    return dist, td, dict(zip(plan.out_keys, outs, strict=True))


def policy_dist_stacked(actor: Any, tds: list[TensorDictBase]) -> Any:
    """``actor.get_dist`` of the policy's inputs in ``tds`` stacked along a new first dim.

    A plain policy runs on the stacked input tensors (what stacking the TensorDicts stacks);
    any other gets the stacked TensorDict of its inputs.
    """
    plan = _usable_plan(actor)
    if plan is not None and all(td.get(k, None) is not None for td in tds for k in plan.in_keys):
        inputs = [torch.stack([td.get(k) for td in tds], 0) for k in plan.in_keys]
        outs = _run(plan, inputs)
        if outs is not None:
            params = dict(zip(plan.names, outs, strict=True))
            return plan.distribution_class(**params, **plan.kwargs)
    keys = list(getattr(actor, "in_keys", []))
    return actor.get_dist(torch.stack([td.select(*keys, strict=False) for td in tds], 0))


def _usable_plan(actor: Any) -> ActorPlan | None:
    try:
        plan = _PLANS[actor]
    except KeyError:
        plan = _PLANS[actor] = actor_plan(actor)
    except TypeError:  # not weak-referenceable: no plan
        return None
    if plan is None:
        return None
    for module in plan.guards:  # a loop, not any(): this runs at every loss call
        if module._forward_hooks or module._forward_pre_hooks:
            return None
    return plan


def _outputs(plan: ActorPlan, td: TensorDictBase) -> tuple[Tensor, ...] | None:
    """The network's outputs on ``td``'s inputs, or None (the general path then runs)."""
    inputs = []
    for key in plan.in_keys:
        value = td.get(key, None)
        if value is None:  # the general path names what is missing
            return None
        inputs.append(value)
    return _run(plan, inputs)


def _run(plan: ActorPlan, inputs: list[Tensor]) -> tuple[Tensor, ...] | None:
    out = plan.net(*inputs)
    outs = (out,) if isinstance(out, Tensor) else tuple(out)
    if len(outs) != len(plan.names) or not all(type(t) is Tensor for t in outs):
        return None  # the module's own error or conversion applies
    return outs


def has_hooks(module: nn.Module) -> bool:
    """Whether ``module`` has forward (pre-)hooks of its own."""
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _plain_module(module: Any) -> bool:
    return (
        type(module) is TensorDictModule
        and module._kwargs is None
        and module.method is None
        and not module.method_kwargs
        and not module._get_kwargs
        and list(module.out_keys) == list(module.out_keys_source)
        and not isinstance(module.module, TensorDictModule)
    )


def _plain_probabilistic(module: Any) -> bool:
    return (
        type(module) is ProbabilisticTensorDictModule
        and len(module.dist_keys) == len(module.in_keys)
        and isinstance(module.distribution_kwargs, dict)
    )
