"""Base class and key set shared by the value estimators."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import cast

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase
from tensordict.nn import skip_existing as _global_skip_existing
from tensordict.utils import NestedKey
from torch import Tensor, nn

__all__ = ["ValueEstimatorBase", "ValueKeys"]


@dataclasses.dataclass(frozen=True)
class ValueKeys:
    """The tensordict keys a value estimator reads and writes (one frozen instance per estimator).

    ``reward``, ``done`` and ``terminated`` are read under ``"next"``; ``value`` is read at the
    root and under ``"next"``; ``advantage`` and ``value_target`` are written at the root.

    ``steps_to_next_obs`` (read at the root when present, e.g. written by an n-step transform)
    is the number of steps between a sample and its ``"next"`` observation: the estimators
    discount with ``gamma ** steps_to_next_obs`` there, as TorchRL. ``sample_log_prob`` is
    TorchRL's key of the behaviour policy's log-probability (its V-trace estimator reads it);
    none of tdrl's estimators reads it, it is kept so that keys set on a loss or estimator
    carry over (default ``"action_log_prob"``, TorchRL's default).

    Examples:
        >>> ValueKeys().reward
        'reward'
        >>> ValueKeys(value=("agents", "state_value")).value
        ('agents', 'state_value')
    """

    reward: NestedKey = "reward"
    done: NestedKey = "done"
    terminated: NestedKey = "terminated"
    value: NestedKey = "state_value"
    advantage: NestedKey = "advantage"
    value_target: NestedKey = "value_target"
    steps_to_next_obs: NestedKey = "steps_to_next_obs"
    sample_log_prob: NestedKey = "action_log_prob"


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    key = unravel_key(key)
    return (key,) if isinstance(key, str) else cast(tuple[str, ...], key)


def _available(td: TensorDictBase) -> list[NestedKey]:
    return sorted(td.keys(include_nested=True, leaves_only=True), key=str)


class ValueEstimatorBase(nn.Module):
    """Routes tensordict entries to a function of :mod:`tdrl.objectives.value.functional`.

    Data layout: a tensordict with batch ``[*B, T]`` (time is the last batch dim), reward at
    ``("next", "reward")`` shaped ``[*B, T, *F]`` (usually ``F = (1,)``), ``("next", "done")`` and
    ``("next", "terminated")`` (``terminated`` falls back to ``done`` when missing), values at
    ``"state_value"`` and ``("next", "state_value")``. ``forward`` writes ``"advantage"`` and
    ``"value_target"`` into the tensordict and returns it.

    Values: when ``value_network`` is given, it is called once on the root and the ``"next"``
    entries stacked along a new leading dim (so it must accept any leading batch dims), and the
    values are written back to the tensordict; ``skip_existing=True`` reuses values already
    present instead. Without a value network the values must be present.

    Multi-agent: done flags with fewer dims than the reward (e.g. done ``[*B, T, 1]`` for a reward
    ``("agents", "reward")`` of shape ``[*B, T, n_agents, 1]``) are unsqueezed at dim -2 and
    expanded to the reward's shape.

    Args:
        gamma: the discount factor, a float or a tensor broadcastable to the reward (every
            estimator requires it; TorchRL's base class does not take it).
        value_network: a tensordict module whose ``out_keys`` hold the value key.
        shifted: TorchRL's single-call option. tdrl always evaluates the root and ``"next"``
            inputs in one stacked call with the exact next inputs, so ``True`` and ``False``
            give the same values (TorchRL's ``shifted=True`` equals them within its budget).
        differentiable: when ``False`` (default) everything runs under ``torch.no_grad()``.
        skip_existing: reuse values already in the tensordict rather than recomputing them;
            ``None`` (default, as TorchRL) follows ``tensordict.nn.skip_existing()``.
        device: the device of ``gamma``/``lmbda`` when they are tensors (None: unchanged).
        deactivate_vmap: TorchRL's switch from vmap to loops; tdrl never vmaps the value
            network (one stacked call), so both values run the same computation.
        value_chunk_size: call the value network on chunks of at most this many elements
            along ``value_chunk_dim`` (bounds memory; the values are the same).
        num_chunks: call the value network on this many chunks instead (exclusive with
            ``value_chunk_size``); ``num_chunk`` is TorchRL's alias.
        num_chunk: alias of ``num_chunks``.
        value_chunk_dim: the batch dim of the tensordict the chunks split (default 0).
        group_key: an integer entry (one id per batch element, e.g. a task id): standardisation
            (``average_gae``/``average_rewards``) is done within each group.
        time_dim: the time dim of the tensordict (None: the dim named ``"time"``, else the
            last); ``forward(..., time_dim=)`` overrides it.

    Raises:
        ValueError: chunk sizes that are not positive integers, or both chunk options.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.objectives.value import TD0Estimator
        >>> td = TensorDict({"state_value": torch.zeros(3, 1), "next": {
        ...     "reward": torch.ones(3, 1), "done": torch.zeros(3, 1, dtype=torch.bool),
        ...     "state_value": torch.ones(3, 1)}}, batch_size=[3])
        >>> TD0Estimator(gamma=0.5)(td)["value_target"].squeeze(-1)
        tensor([1.5000, 1.5000, 1.5000])
    """

    gamma: float | Tensor

    def __init__(
        self,
        *,
        gamma: float | Tensor | None = None,
        value_network: TensorDictModuleBase | None = None,
        shifted: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        device: torch.device | str | None = None,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        group_key: NestedKey | None = None,
        time_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.device = None if device is None else torch.device(device)
        if gamma is not None:
            self._set_factor("gamma", gamma)
        if value_network is not None and not hasattr(value_network, "in_keys"):
            raise TypeError(
                f"{type(self).__name__}.__init__: value_network has no in_keys (got "
                f"{type(value_network).__name__}; expected a tensordict.nn.TensorDictModule). "
                "Wrap the network: TensorDictModule(net, in_keys=[...], out_keys=['state_value'])."
            )
        self.value_network = value_network
        self.shifted = bool(shifted)
        self.differentiable = differentiable
        self.skip_existing = skip_existing
        self.deactivate_vmap = bool(deactivate_vmap)
        self.value_chunk_size = self._positive("value_chunk_size", value_chunk_size)
        chunks = self._positive("num_chunks", num_chunks)
        alias = self._positive("num_chunk", num_chunk)
        if alias is not None and chunks is not None and alias != chunks:
            raise ValueError(
                f"{type(self).__name__}.__init__: num_chunks and num_chunk differ (got "
                f"{chunks} and {alias}; expected one of them). Pass only num_chunks."
            )
        self.num_chunks = chunks if alias is None else alias
        if self.value_chunk_size is not None and self.num_chunks is not None:
            raise ValueError(
                f"{type(self).__name__}.__init__: value_chunk_size and num_chunks are exclusive "
                f"(got {self.value_chunk_size} and {self.num_chunks}). Pass only one."
            )
        if isinstance(value_chunk_dim, bool) or not isinstance(value_chunk_dim, int):
            raise TypeError(
                f"{type(self).__name__}.__init__: value_chunk_dim must be an int (got "
                f"{value_chunk_dim!r})."
            )
        self.value_chunk_dim = value_chunk_dim
        self.group_key = None if group_key is None else unravel_key(group_key)
        self.time_dim = time_dim
        self._keys = ValueKeys()

    def _positive(self, name: str, value: int | None) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"{type(self).__name__}.__init__: {name} must be a positive int (got "
                f"{value!r}; expected e.g. {name}=4). Pass an int >= 1 or None."
            )
        return value

    def _set_factor(self, name: str, value: float | Tensor) -> None:
        if isinstance(value, Tensor):
            self.register_buffer(name, value if self.device is None else value.to(self.device))
            return
        if isinstance(value, bool) or not isinstance(value, float | int) or not 0 <= value < 1e308:
            raise ValueError(
                f"{type(self).__name__}.__init__: {name} must be a finite non-negative number or "
                f"a tensor (got {value!r}; expected e.g. {name}=0.99). Pass a float in [0, 1]."
            )
        setattr(self, name, float(value))

    @property
    def tensor_keys(self) -> ValueKeys:
        """The keys this instance reads and writes (see :class:`ValueKeys`)."""
        return self._keys

    def set_keys(self, **keys: NestedKey) -> ValueEstimatorBase:
        """Sets the tensordict keys of this instance; returns ``self``.

        Args:
            **keys: any of ``reward``, ``done``, ``terminated``, ``value``, ``advantage``,
                ``value_target``, ``steps_to_next_obs``, ``sample_log_prob``, mapped to a
                (nested) key.

        Examples:
            >>> from tdrl.objectives.value import GAE
            >>> gae = GAE(gamma=0.99, lmbda=0.95).set_keys(reward=("agents", "reward"))
            >>> gae.tensor_keys.reward
            ('agents', 'reward')
        """
        valid = [f.name for f in dataclasses.fields(ValueKeys)]
        for name, key in keys.items():
            if name not in valid:
                raise KeyError(
                    f"{type(self).__name__}.set_keys: unknown key name (got {name!r}; expected "
                    f"one of {valid}). Use one of the listed names."
                )
            try:
                keys[name] = unravel_key(key)
            except Exception:
                raise TypeError(
                    f"{type(self).__name__}.set_keys: {name} is not a nested key (got {key!r}; "
                    "expected a str or a tuple of str). Pass e.g. ('agents', 'reward')."
                ) from None
        self._keys = dataclasses.replace(self._keys, **keys)
        return self

    @property
    def in_keys(self) -> list[NestedKey]:
        """The keys ``forward`` reads (the value network's inputs when it has one)."""
        keys = self._keys
        value_keys: list[NestedKey] = [keys.value]
        if self.value_network is not None and not self.skip_existing:
            value_keys = list(self.value_network.in_keys)
        read = [
            *value_keys,
            *(unravel_key(("next", k)) for k in value_keys),
            unravel_key(("next", keys.reward)),
            unravel_key(("next", keys.done)),
            unravel_key(("next", keys.terminated)),
        ]
        return list(dict.fromkeys(read))

    @property
    def out_keys(self) -> list[NestedKey]:
        """The keys ``forward`` writes."""
        out = [self._keys.advantage, self._keys.value_target]
        if self.value_network is not None:
            out += [self._keys.value, unravel_key(("next", self._keys.value))]
        return out

    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        time_dim: int | None = None,
    ) -> TensorDictBase:
        """Computes the advantage and value target and writes them into ``tensordict``.

        Args:
            tensordict: the data (see the class docstring for the layout).
            params: parameters for the value network (TorchRL's functional call); the next
                values use ``target_params``, or ``params`` detached when that is None.
            target_params: parameters for the next values.
            time_dim: the time dim of ``tensordict`` for this call (overrides the constructor's).
        """
        keys = self._keys
        dim = self._time_dim(tensordict, time_dim)
        grad = contextlib.nullcontext() if self.differentiable else torch.no_grad()
        with grad:
            reward, done, terminated = self._signals(tensordict)
            value, next_value = self._values(tensordict, params, target_params)
            advantage, target = self._estimate(
                value, next_value, reward, done, terminated, time_dim=dim, tensordict=tensordict
            )
        tensordict.set(keys.advantage, advantage)
        tensordict.set(keys.value_target, target)
        return tensordict

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        target_params: TensorDictBase | None = None,
        next_value: Tensor | None = None,
        time_dim: int | None = None,
        params: TensorDictBase | None = None,
        **kwargs: object,
    ) -> Tensor:
        """Returns the value target of ``tensordict`` without writing it (TorchRL's method).

        Args:
            tensordict: the data (see the class docstring).
            target_params: parameters of the value network for the next values.
            next_value: the bootstrap values ``V(s_{t+1})`` to use instead of the network's.
            time_dim: the time dim of ``tensordict`` (overrides the constructor's).
            params: parameters of the value network for the root values.
            **kwargs: keyword arguments passed to every call of the value network
                (``value_network(td, **kwargs)``), as TorchRL documents; they need a value
                network that is called (no ``next_value``, values not reused).

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from tdrl.objectives.value import TD0Estimator
            >>> td = TensorDict({"state_value": torch.zeros(2, 1), "next": {
            ...     "reward": torch.ones(2, 1), "done": torch.zeros(2, 1, dtype=torch.bool)}},
            ...     batch_size=[2])
            >>> TD0Estimator(gamma=0.5).value_estimate(td, next_value=torch.ones(2, 1)).squeeze(-1)
            tensor([1.5000, 1.5000])
        """
        dim = self._time_dim(tensordict, time_dim)
        grad = contextlib.nullcontext() if self.differentiable else torch.no_grad()
        with grad:
            reward, done, terminated = self._signals(tensordict)
            if next_value is None:
                value, next_value = self._values(tensordict, params, target_params, kwargs)
            else:
                value = tensordict.get(self._keys.value, None)
                if value is None:
                    value = torch.zeros_like(next_value)
            _, target = self._estimate(
                value, next_value, reward, done, terminated, time_dim=dim, tensordict=tensordict
            )
        return target

    def _time_dim(self, tensordict: TensorDictBase, time_dim: int | None) -> int:
        dim = self.time_dim if time_dim is None else time_dim
        if dim is None:
            names = tensordict.names if tensordict._has_names() else []
            return names.index("time") if "time" in names else tensordict.ndim - 1
        if not -tensordict.ndim <= dim < tensordict.ndim:
            raise ValueError(
                f"{type(self).__name__}.forward: time_dim is out of range (got {dim} for a "
                f"tensordict with batch size {tuple(tensordict.batch_size)}; expected one of its "
                "batch dims). Pass a batch dim of the tensordict."
            )
        return dim % tensordict.ndim

    def _signals(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor, Tensor]:
        keys = self._keys
        reward = self._get(tensordict, ("next", *_as_tuple(keys.reward)))
        done = self._get(tensordict, ("next", *_as_tuple(keys.done)))
        terminated = tensordict.get(("next", *_as_tuple(keys.terminated)), None)
        done = self._expand_flag(done, reward, keys.done)
        if terminated is None:
            terminated = done
        else:
            terminated = self._expand_flag(terminated, reward, keys.terminated)
        return reward, done, terminated

    def _discount(self, tensordict: TensorDictBase | None, reward: Tensor) -> float | Tensor:
        """``gamma``, or ``gamma ** steps_to_next_obs`` where that entry is present (TorchRL)."""
        steps = None if tensordict is None else tensordict.get(self._keys.steps_to_next_obs, None)
        if steps is None:
            return self.gamma
        if steps.numel() == reward.numel():
            steps = steps.reshape(reward.shape)
        else:
            steps = self._expand_flag(steps, reward, self._keys.steps_to_next_obs)
        gamma = self.gamma
        if not isinstance(gamma, Tensor):
            gamma = torch.tensor(gamma, dtype=reward.dtype, device=reward.device)
        return gamma.to(reward.device) ** steps

    def _groups(self, tensordict: TensorDictBase | None) -> Tensor | None:
        """The ``group_key`` ids of ``tensordict`` (None without a group key)."""
        if self.group_key is None:
            return None
        if tensordict is None:
            raise ValueError(
                f"{type(self).__name__}: group_key={self.group_key!r} needs the tensordict "
                "(got tensors only). Call the estimator on the tensordict."
            )
        return self._get(tensordict, self.group_key)

    def _estimate(
        self,
        value: Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
        tensordict: TensorDictBase | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Returns ``(advantage, value_target)``; each estimator implements it."""
        raise NotImplementedError

    def _expand_flag(self, flag: Tensor, reward: Tensor, key: NestedKey) -> Tensor:
        """Unsqueezes a done flag at -2 until it has the reward's dims, then expands it."""
        if flag.shape == reward.shape:
            return flag
        while flag.ndim < reward.ndim:
            flag = flag.unsqueeze(-2)
        try:
            return flag.expand(reward.shape)
        except RuntimeError:
            raise ValueError(
                f"{type(self).__name__}.forward: {unravel_key(('next', key))!r} does not fit the "
                f"reward (got shape {tuple(flag.shape)} for reward {tuple(reward.shape)}; "
                "expected the reward's shape or fewer trailing dims). Store one flag per reward "
                "entry or one per step, e.g. [*B, T, 1]."
            ) from None

    def _get(self, td: TensorDictBase, key: NestedKey) -> Tensor:
        value = td.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__}.forward: missing key {unravel_key(key)!r} (got keys "
                f"{_available(td)}; expected the reward/done keys under 'next' and the values). "
                "Add the entry, point set_keys() at the right key, or pass a value_network."
            )
        return value

    def _values(
        self,
        td: TensorDictBase,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        kwargs: dict[str, object] | None = None,
    ) -> tuple[Tensor, Tensor]:
        value_key = _as_tuple(self._keys.value)
        next_key = ("next", *value_key)
        net = self.value_network
        skip = self.skip_existing if self.skip_existing is not None else _global_skip_existing()
        if net is None or (skip and value_key in td.keys(True) and next_key in td.keys(True)):
            return self._get(td, value_key), self._get(td, next_key)
        in_keys = [_as_tuple(k) for k in net.in_keys]
        nxt = td.get("next")
        if params is None and target_params is None:
            # One call over root and next: stack both along a new leading dim, then split.
            inputs = td.empty(batch_size=(2, *td.batch_size), names=None)
            for key in in_keys:
                inputs.set(key, torch.stack([self._get(td, key), self._get(nxt, key)]))
            value, next_value = self._call(net, inputs, value_key, 1, None, kwargs).unbind(0)
        else:
            if target_params is None and params is not None:
                target_params = params.detach()
            value = self._call(net, td.select(*in_keys), value_key, 0, params, kwargs)
            next_value = self._call(net, nxt.select(*in_keys), value_key, 0, target_params, kwargs)
        td.set(value_key, value)
        td.set(next_key, next_value)
        return value, next_value

    def _call(
        self,
        net: TensorDictModuleBase,
        inputs: TensorDictBase,
        value_key: tuple[str, ...],
        lead: int,
        params: TensorDictBase | None = None,
        kwargs: dict[str, object] | None = None,
    ) -> Tensor:
        """Runs ``net`` on ``inputs`` (in chunks when asked, with ``params`` and ``kwargs``)."""
        ndim = inputs.ndim - lead
        dim = self.value_chunk_dim
        if not -ndim <= dim < ndim:
            raise ValueError(
                f"{type(self).__name__}.forward: value_chunk_dim is out of range (got {dim} for "
                f"batch size {tuple(inputs.batch_size[lead:])}). Pass a batch dim of the data."
            )
        dim = dim % ndim + lead
        if self.num_chunks is not None:
            chunks = inputs.tensor_split(min(self.num_chunks, max(inputs.shape[dim], 1)), dim)
        elif self.value_chunk_size is not None:
            chunks = inputs.split(self.value_chunk_size, dim)
        else:
            chunks = (inputs,)
        ctx = contextlib.nullcontext() if params is None else params.to_module(net)
        values = []
        with ctx:
            for chunk in chunks:
                out = net(chunk) if not kwargs else net(chunk, **kwargs)
                values.append(self._output(net, out, value_key))
        return values[0] if len(values) == 1 else torch.cat(values, dim)

    def _output(
        self, net: TensorDictModuleBase, out: TensorDictBase, value_key: tuple[str, ...]
    ) -> Tensor:
        values = out.get(value_key, None)
        if values is None:
            raise KeyError(
                f"{type(self).__name__}.forward: the value network did not write "
                f"{unravel_key(value_key)!r} (got out_keys {list(net.out_keys)}; expected the "
                "value key among them). Call set_keys(value=...) with the network's out key."
            )
        return values


def _standardise(x: Tensor, eps: float, groups: Tensor | None = None) -> Tensor:
    """``(x - mean) / std`` with TorchRL's unbiased std, over all of ``x`` or within groups."""
    if groups is None:
        return (x - x.mean()) / x.std().clamp_min(eps)
    while groups.ndim < x.ndim:
        groups = groups.unsqueeze(-1)
    if groups.ndim > x.ndim:
        raise ValueError(
            f"group ids do not fit the values (got shape {tuple(groups.shape)} for values "
            f"{tuple(x.shape)}; expected one id per batch element). Store ids shaped [*B]."
        )
    ids = groups.expand(x.shape).reshape(-1)
    flat = x.reshape(-1)
    _, index = torch.unique(ids, return_inverse=True)
    count = torch.zeros(int(index.max()) + 1, dtype=flat.dtype, device=flat.device)
    count.index_add_(0, index, torch.ones_like(flat))
    mean = torch.zeros_like(count).index_add_(0, index, flat) / count
    centred = flat - mean[index]
    var = torch.zeros_like(count).index_add_(0, index, centred.square()) / (count - 1).clamp_min(1)
    return (centred / var.sqrt().clamp_min(eps)[index]).reshape(x.shape)
