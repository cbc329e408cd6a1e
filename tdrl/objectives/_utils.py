"""Helpers shared by the off-policy losses: distances, targets, action values, actor samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictParams
from tensordict.utils import NestedKey, unravel_key
from torch import Tensor, nn

from tdrl.modules import MLP
from tdrl.objectives._actor_plan import has_hooks, policy_dist_acted
from tdrl.objectives._mask import masked_reduce, valid_mask
from tdrl.objectives._policy_gradient import distance_loss
from tdrl.objectives.value._estimators import _TDBase
from tdrl.specs import Bounded, Categorical, Composite, OneHot, TensorSpec

__all__: list[str] = []

LOSS_FUNCTIONS = ("l2", "smooth_l1", "l1")
ACTION_SPACES = ("one_hot", "categorical")
_ACTION_SPACE_NAMES = {"one_hot": "one_hot", "one-hot": "one_hot", "categorical": "categorical"}


def distance(pred: Tensor, target: Tensor, loss_function: str) -> Tensor:
    """``distance_loss`` (``"l2"`` is the squared error) with the target broadcast."""
    return distance_loss(pred, target.expand_as(pred), loss_function, strict_shape=False)


def check_loss_function(loss_function: str, where: str) -> str:
    if loss_function not in LOSS_FUNCTIONS:
        raise ValueError(
            f"{where}: unknown loss_function (got {loss_function!r}; expected one of "
            f"{list(LOSS_FUNCTIONS)}). Pass e.g. loss_function='smooth_l1'."
        )
    return loss_function


def get_entry(td: TensorDictBase, key: NestedKey, where: str) -> Any:
    """``td.get(key)`` with an error that lists the available keys."""
    value = td.get(key, None)
    if value is None:
        available = sorted(map(str, td.keys(include_nested=True, leaves_only=True)))
        raise KeyError(
            f"{where}: missing key {key!r} (got keys {available}; expected it in the batch). "
            "Add the entry or point set_keys() at the right key."
        )
    return value


def value_target(
    loss: Any, td: TensorDictBase, value: Tensor, next_value: Tensor, where: str
) -> Tensor:
    """The target of ``loss.value_estimator`` for ``value`` and the bootstrap ``next_value``.

    ``value`` (``V(s_t)``) only feeds the estimator's advantage; ``next_value`` is
    ``V(s_{t+1})``. The reward and done flags are read from ``td["next"]`` with the
    estimator's keys (done flags broadcast to the reward as in the estimator). The tensors go
    straight to the estimator's ``_estimate`` hook: no TensorDict is built, ``td`` is not
    written.
    """
    est = loss.value_estimator
    keys = est.tensor_keys
    nxt = get_entry(td, "next", where)
    reward = get_entry(nxt, keys.reward, where)
    done = est._expand_flag(get_entry(nxt, keys.done, where), reward, keys.done)
    terminated = nxt.get(keys.terminated, None)
    if terminated is None:
        terminated = done
    else:
        terminated = est._expand_flag(terminated, reward, keys.terminated)
    time_dim = est._time_dim(td, None)
    with torch.no_grad():
        if type(est)._estimate is _TDBase._estimate and not est.average_rewards:
            # What _estimate returns as its target, without the advantage it also computes.
            gamma = est._discount(td, reward)
            return est._target(gamma, next_value, reward, done, terminated, time_dim=time_dim)
        _, target = est._estimate(
            value, next_value, reward, done, terminated, time_dim=time_dim, tensordict=td
        )
    return target


def input_tensors(
    td: TensorDictBase,
    keys: list[NestedKey],
    replace: Mapping[NestedKey, Tensor] | None,
    where: str,
) -> list[Tensor]:
    """The entries ``keys`` of ``td``, those in ``replace`` taken from there instead."""
    if not replace:
        return [get_entry(td, k, where) for k in keys]
    given = {unravel_key(k): v for k, v in replace.items()}
    return [given[k] if k in given else get_entry(td, k, where) for k in map(unravel_key, keys)]


def batch_mean(
    values: Tensor, td: TensorDictBase, weight_key: NestedKey | None, owner: Any = None
) -> Tensor:
    """The mean of ``values`` (``[*B, ...]``); weighted per sample by ``td[weight_key]`` if present.

    As TorchRL with ``use_prioritized_weights="auto"``: the importance weights a prioritized
    buffer puts in its samples (``"priority_weight"``) give ``sum(w * v) / sum(w)``. With the
    loss module ``owner``, its validity masks (``loss_mask_key``) present in ``td`` restrict
    the mean to the valid positions (TorchRL's ``_reduce_loss``).
    """
    weights = None if weight_key is None else td.get(weight_key, None)
    if owner is not None:
        heads = owner._mask_heads
        # A plain TensorDict without the masks' top-level names holds no mask: no call.
        entries = td._tensordict if type(td) is TensorDict else heads
        for head in heads:
            if head in entries:
                mask = valid_mask(owner, td, values)
                if mask is not None:
                    return masked_reduce(values, mask, "mean", weights)
                break
    if weights is None:
        return values.mean()
    dims = td.batch_dims
    per = values.flatten(dims).mean(-1) if values.ndim > dims else values
    weights = weights.reshape(per.shape).to(per.dtype)
    return (per * weights).sum() / weights.sum()


def check_prioritized_weights(value: str | bool, where: str) -> str | bool:
    if value not in ("auto", True, False):
        raise ValueError(
            f"{where}: use_prioritized_weights must be 'auto', True or False (got {value!r})."
        )
    return value


def per_sample(error: Tensor, batch_dims: int, squared: bool = True) -> Tensor:
    """The per-sample TD error: ``error ** 2`` (``|error|`` when not ``squared``).

    TorchRL's priorities are squared errors (DQN, DDPG, TD3, IQL, CQL, REDQ) or absolute
    errors (SAC, discrete SAC). Every dim after the first ``batch_dims`` (agents, features) is
    averaged.
    """
    error = error.detach()
    error = error.square() if squared else error.abs()
    trailing = error.shape[batch_dims:]
    if trailing.numel() == 1:  # e.g. [*B, 1]: a view, no reduction
        return error.reshape(error.shape[:batch_dims])
    return error.flatten(batch_dims).mean(-1)


def gather_action_value(
    action_value: Tensor, action: Tensor, action_space: str | None, lead: int = 0
) -> Tensor:
    """The value of the taken action, shape ``[*lead, *B, 1]``; one-hot or index actions.

    ``action_value`` is ``[*lead, *B, n]`` (``lead`` leading dims, e.g. an ensemble, that the
    action does not have). With ``action_space=None`` an action with as many dims as one
    member's values and ``n`` entries in the last one is one-hot, any other is an index (with
    or without a trailing dim of size 1).
    """
    member_ndim = action_value.ndim - lead
    if action_space is None:
        one_hot = action.ndim == member_ndim and action.shape[-1] == action_value.shape[-1]
        action_space = "one_hot" if one_hot else "categorical"
    if action_space == "one_hot":
        index = (action.to(torch.uint8) if action.dtype is torch.bool else action).argmax(
            -1, keepdim=True
        )
    else:
        index = action.long()
        if index.ndim < member_ndim:
            index = index.unsqueeze(-1)
    return action_value.gather(-1, index.expand(*action_value.shape[:-1], 1))


def resolve_action_space(
    action_space: str | TensorSpec | None, network: nn.Module | None, where: str
) -> str | None:
    """``"one_hot"``/``"categorical"`` from a string, a spec or the network; None = infer."""
    if isinstance(action_space, str):
        if action_space not in _ACTION_SPACE_NAMES:
            raise ValueError(
                f"{where}: unknown action_space (got {action_space!r}; expected one of "
                f"{list(_ACTION_SPACE_NAMES)} or a OneHot/Categorical spec)."
            )
        return _ACTION_SPACE_NAMES[action_space]
    if isinstance(action_space, TensorSpec):
        leaves = _leaves(action_space)
        for leaf in leaves:
            if isinstance(leaf, OneHot):
                return "one_hot"
            if isinstance(leaf, Categorical):
                return "categorical"
        raise ValueError(
            f"{where}: the action spec holds no OneHot/Categorical leaf (got "
            f"{[type(s).__name__ for s in leaves]}). Pass action_space='one_hot' or 'categorical'."
        )
    if network is not None:
        for module in network.modules():
            space = getattr(module, "action_space", None)
            if space in ACTION_SPACES:
                return str(space)
    return None


def _leaves(spec: TensorSpec) -> list[TensorSpec]:
    if isinstance(spec, Composite):
        return list(spec.values(True, True))
    return [spec]


def action_bounds(
    action_spec: TensorSpec | None,
    bounds: tuple[float | Tensor, float | Tensor] | None,
    where: str,
) -> tuple[Tensor, Tensor] | None:
    """``(low, high)`` from a Bounded spec (leading rows that repeat are dropped) or bounds."""
    if bounds is not None:
        low, high = bounds
        return torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
    if action_spec is None:
        return None
    leaf = next((s for s in _leaves(action_spec) if isinstance(s, Bounded)), None)
    if leaf is None:
        raise ValueError(
            f"{where}: the action spec has no Bounded leaf (got {type(action_spec).__name__}; "
            "expected a Bounded spec). Pass bounds=(low, high) instead."
        )
    return _squeeze_rows(leaf.low), _squeeze_rows(leaf.high)


def _squeeze_rows(t: Tensor) -> Tensor:
    # Env batch dims repeat the same bound: keep one row so the bound broadcasts to any batch.
    while t.ndim > 1 and bool((t == t[:1]).all()):
        t = t[0]
    return t.clone()


def sample_unwritten(
    actor: nn.Module, td: TensorDictBase, sample_shape: tuple[int, ...] = ()
) -> tuple[Tensor, Tensor]:
    """Reparameterised actions of ``actor`` on ``td`` and their log-probability.

    ``td`` is left as it is: a policy that writes its parameters gets a copy.
    """
    return draw(policy_dist_acted(actor, td)[0], torch.Size(sample_shape))


def draw(dist: Any, shape: torch.Size) -> tuple[Tensor, Tensor]:
    """Reparameterised samples of ``dist`` and their log-probability (one pass if it can)."""
    if hasattr(dist, "rsample_and_log_prob"):
        return dist.rsample_and_log_prob(shape)
    action = dist.rsample(shape)
    return action, dist.log_prob(action)


def detached(module: nn.Module) -> TensorDictBase:
    """The parameters and buffers of ``module`` as a TensorDict of detached tensors."""
    return TensorDict.from_module(module).detach()


def unsqueeze_like(t: Tensor, ref: Tensor) -> Tensor:
    """Appends trailing unit dims to ``t`` until it has ``ref``'s number of dims."""
    while t.ndim < ref.ndim:
        t = t.unsqueeze(-1)
    return t


def sample_acted(
    actor: nn.Module, td: TensorDictBase, action_key: NestedKey
) -> tuple[TensorDictBase, dict[NestedKey, Tensor], Tensor, Tensor]:
    """Reparameterised policy actions at ``td`` and ``(td to read, replace)`` for the critics.

    Reading ``td`` with ``replace`` gives what reading a copy of ``td`` gives after the
    policy's ``get_dist`` wrote into it and the action was set at ``action_key``.

    Returns:
        ``(td, replace, action, log_prob)``.
    """
    dist, td, replace = policy_dist_acted(actor, td)
    action, log_prob = draw(dist, torch.Size())
    if replace:
        replace[action_key] = action
    else:
        td.set(action_key, action)
    return td, replace, action, log_prob


def policy_probs(actor: nn.Module, td: TensorDictBase) -> tuple[Tensor, Tensor]:
    """``(probs, log_probs)`` of a discrete actor over its classes (last dim).

    Masked classes (probability 0) get a log-probability of 0 rather than ``-inf`` so that
    ``probs * log_probs`` stays finite.
    """
    dist = policy_dist_acted(actor, td)[0]  # td is not written: a copy if the policy writes
    log_probs = torch.log_softmax(dist.logits, -1)
    probs = log_probs.exp()
    return probs, log_probs.masked_fill(probs == 0, 0.0)


# A plain MLP (``nn.Linear`` and parameter-free layers, possibly nested in ``nn.Sequential``)
# inside a plain ``TensorDictModule`` without hooks is run straight from a parameter
# TensorDict: no ``to_module`` swap for targets or detached weights, and batched matrix
# products for stacked (ensemble) weights. Anything else goes through the module itself.
Layers = list[tuple[tuple[str, ...], nn.Module | None]]


def plain_layers(module: Any) -> Layers | None:
    """``[(parameter path, None for nn.Linear else the layer)]``, or None if not a plain MLP."""
    if type(module).forward is not TensorDictModule.forward or len(module.out_keys) != 1:
        return None
    if any(has_hooks(m) for m in module.modules()):
        return None
    inner: Any = getattr(module, "module", None)
    if not (_is_mlp(inner) or (type(inner) is nn.Sequential and len(module.in_keys) == 1)):
        return None
    layers: Layers = []
    return layers if _collect_layers(inner, ("module",), layers) else None


def _is_mlp(module: Any) -> bool:
    return isinstance(module, MLP) and type(module).forward is MLP.forward


def _collect_layers(module: nn.Module, prefix: tuple[str, ...], layers: Layers) -> bool:
    for name, child in module.named_children():
        path = (*prefix, name)
        if type(child) is nn.Linear:
            layers.append((path, None))
        elif type(child) is nn.Sequential or _is_mlp(child):
            if not _collect_layers(child, path, layers):
                return False
        elif next(child.parameters(), None) is None and next(child.buffers(), None) is None:
            layers.append((path, child))
        else:
            return False
    return True


def run_layers(
    layers: Layers,
    inputs: list[Tensor],
    params: TensorDictBase | nn.Module,
    detach: bool = False,
    member: int | None = None,
) -> Tensor:
    """Runs the layers of :func:`plain_layers` with ``params``, stacked (``[N]``) or not.

    Stacked parameters give ``[N, *batch, *out]`` through ``baddbmm`` on the stacked weights.
    ``params`` may also be the module the layers come from (its own weights, read from its
    linear layers at each call). With ``detach``, each weight is detached as it is read: the
    same values as running on ``params.detach()``, without building that TensorDict.
    ``member`` runs one copy of stacked parameters (``params[member]``, indexed per weight).
    """
    x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
    batch = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    tensors = _plain_tensordict(params)
    stacked = tensors is not None and tensors.batch_dims == 1 and member is None
    if tensors is not None and stacked:
        x = x.expand(tensors.batch_size[0], *x.shape)
    fresh = False  # x was just produced by a linear layer (safe to overwrite in place)
    for path, layer in layers:
        if layer is not None:
            inplace = _INPLACE.get(type(layer)) if fresh else None
            x = inplace(x) if inplace is not None else layer(x)
            fresh = False
            continue
        fresh = True
        if tensors is None:  # the module itself
            linear: Any = params
            for name in path:
                linear = getattr(linear, name)
            weight, bias = linear.weight, linear.bias
        else:
            node = _node(tensors, path)
            weight, bias = _entry(node, "weight"), _entry(node, "bias")
            if member is not None:
                weight, bias = weight[member], None if bias is None else bias[member]
        if detach:
            weight, bias = weight.detach(), None if bias is None else bias.detach()
        if not stacked:
            x = F.linear(x, weight, bias)
        elif bias is None:
            x = torch.bmm(x, weight.transpose(-1, -2))
        else:
            x = torch.baddbmm(bias.unsqueeze(-2), x, weight.transpose(-1, -2))
    lead = x.shape[:1] if stacked else ()
    return x.reshape(*lead, *batch, *x.shape[len(lead) + 1 :])


def _node(td: TensorDictBase, path: tuple[str, ...]) -> Any:
    """``td.get(path)`` for a sub-TensorDict; plain ``TensorDict`` levels read their entry dict
    (anything missing or unusual goes through ``get``, which names what is wrong)."""
    node: Any = td
    for name in path:
        node = node._tensordict.get(name) if type(node) is TensorDict else None
        if node is None:
            return td.get(path)
    return node


def _entry(td: Any, name: str) -> Any:
    """``td.get(name, None)``, the entry dict of a plain ``TensorDict`` read directly (what its
    ``get`` returns for a string key, without the three calls a read costs)."""
    return td._tensordict.get(name) if type(td) is TensorDict else td.get(name, None)


def _plain_tensordict(params: TensorDictBase | nn.Module) -> TensorDictBase | None:
    """The TensorDict to read weights from (None: ``params`` is the module itself).

    A ``TensorDictParams`` without get hooks reads from the TensorDict it wraps: its ``get``
    returns that TensorDict's entries (the same parameter objects) through three more calls
    per read, which add up over the layers of every critic call.
    """
    if not isinstance(params, TensorDictBase):  # TensorDictParams is one too
        return None
    inner = getattr(params, "_param_td", None)
    if isinstance(params, TensorDictParams) and inner is not None and not params._get_post_hook:
        return inner
    return params


# In-place versions of common activations: the output of a linear layer is not saved for its
# backward, so overwriting it halves the memory traffic of large (ensemble) activations.
_INPLACE: dict[type, Any] = {
    nn.ReLU: torch.relu_,
    nn.Tanh: torch.tanh_,
    nn.Sigmoid: torch.sigmoid_,
}


def call_with_params(
    module: Any,
    layers: Layers | None,
    td: TensorDictBase,
    params: TensorDictBase | None,
    out_key: NestedKey,
    where: str,
    detach: bool = False,
    replace: Mapping[NestedKey, Tensor] | None = None,
) -> Tensor:
    """``module``'s ``out_key`` on ``td`` with ``params`` (its own weights when None).

    ``td`` is not modified. A plain MLP is called on the input tensors directly. With
    ``detach`` (and ``params=None``), the module's own weights are used detached. Entries in
    ``replace`` are read instead of ``td``'s (as if set in a copy of ``td``).
    """
    if layers is not None and out_key == module.out_keys[0]:
        inputs = input_tensors(td, module.in_keys, replace, where)
        if params is None and not detach:
            return module.module(*inputs)
        return run_layers(layers, inputs, module if params is None else params, detach)
    if detach and params is None:
        params = detached(module)
    td = td.copy()
    for key, value in (replace or {}).items():
        td.set(key, value)
    if params is None:
        return get_entry(module(td), out_key, where)
    with params.to_module(module):
        return get_entry(module(td), out_key, where)


def acted(
    actor: Any,
    layers: Layers | None,
    td: TensorDictBase,
    params: TensorDictBase | None,
    key: NestedKey,
) -> tuple[TensorDictBase, dict[NestedKey, Tensor]]:
    """``(td to read, replace)`` that hold ``actor``'s action (computed with ``params``, its own
    weights if None) as a copy of ``td`` it wrote into would: for the critics' ``replace=``.

    A plain actor (see :func:`plain_layers`) writing ``key`` is run on the input tensors and its
    action returned in ``replace`` (``td`` as given, not written); any other actor writes into
    a copy of ``td`` (``replace`` empty).
    """
    if layers is not None:
        inputs = [get_entry(td, k, "act") for k in actor.in_keys]
        action = actor.module(*inputs) if params is None else run_layers(layers, inputs, params)
        if unravel_key(actor.out_keys[0]) == unravel_key(key):
            return td, {key: action}
        return td.copy().set(actor.out_keys[0], action), {}
    td = td.copy()
    if params is None:
        actor(td)
    else:
        with params.to_module(actor):
            actor(td)
    return td, {}
