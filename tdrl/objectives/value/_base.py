"""Base class and key set shared by the value estimators."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import cast

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

__all__ = ["ValueEstimatorBase", "ValueKeys"]


@dataclasses.dataclass(frozen=True)
class ValueKeys:
    """The tensordict keys a value estimator reads and writes (one frozen instance per estimator).

    ``reward``, ``done`` and ``terminated`` are read under ``"next"``; ``value`` is read at the
    root and under ``"next"``; ``advantage`` and ``value_target`` are written at the root.

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
        gamma: the discount factor, a float or a tensor broadcastable to the reward.
        value_network: a tensordict module whose ``out_keys`` hold the value key.
        differentiable: when ``False`` (default) everything runs under ``torch.no_grad()``.
        skip_existing: reuse values already in the tensordict rather than recomputing them.

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
        gamma: float | Tensor,
        value_network: TensorDictModuleBase | None = None,
        differentiable: bool = False,
        skip_existing: bool = False,
    ) -> None:
        super().__init__()
        self._set_factor("gamma", gamma)
        if value_network is not None and not hasattr(value_network, "in_keys"):
            raise TypeError(
                f"{type(self).__name__}.__init__: value_network has no in_keys (got "
                f"{type(value_network).__name__}; expected a tensordict.nn.TensorDictModule). "
                "Wrap the network: TensorDictModule(net, in_keys=[...], out_keys=['state_value'])."
            )
        self.value_network = value_network
        self.differentiable = differentiable
        self.skip_existing = skip_existing
        self._keys = ValueKeys()

    def _set_factor(self, name: str, value: float | Tensor) -> None:
        if isinstance(value, Tensor):
            self.register_buffer(name, value)
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
                ``value_target``, mapped to a (nested) key.

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

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes the advantage and value target and writes them into ``tensordict``."""
        keys = self._keys
        grad = contextlib.nullcontext() if self.differentiable else torch.no_grad()
        with grad:
            reward = self._get(tensordict, ("next", *_as_tuple(keys.reward)))
            done = self._get(tensordict, ("next", *_as_tuple(keys.done)))
            terminated = tensordict.get(("next", *_as_tuple(keys.terminated)), None)
            done = self._expand_flag(done, reward, keys.done)
            if terminated is None:
                terminated = done
            else:
                terminated = self._expand_flag(terminated, reward, keys.terminated)
            value, next_value = self._values(tensordict)
            advantage, target = self._estimate(
                value, next_value, reward, done, terminated, time_dim=tensordict.ndim - 1
            )
        tensordict.set(keys.advantage, advantage)
        tensordict.set(keys.value_target, target)
        return tensordict

    def _estimate(
        self,
        value: Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
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

    def _values(self, td: TensorDictBase) -> tuple[Tensor, Tensor]:
        value_key = _as_tuple(self._keys.value)
        next_key = ("next", *value_key)
        net = self.value_network
        if net is None or (
            self.skip_existing and value_key in td.keys(True) and next_key in td.keys(True)
        ):
            return self._get(td, value_key), self._get(td, next_key)
        in_keys = [_as_tuple(k) for k in net.in_keys]
        nxt = td.get("next")
        # One call over root and next: stack both along a new leading dim, then split.
        inputs = td.empty(batch_size=(2, *td.batch_size), names=None)
        for key in in_keys:
            inputs.set(key, torch.stack([self._get(td, key), self._get(nxt, key)]))
        out = net(inputs)
        values = out.get(value_key, None)
        if values is None:
            raise KeyError(
                f"{type(self).__name__}.forward: the value network did not write "
                f"{unravel_key(value_key)!r} (got out_keys {list(net.out_keys)}; expected the "
                "value key among them). Call set_keys(value=...) with the network's out key."
            )
        value, next_value = values.unbind(0)
        td.set(value_key, value)
        td.set(next_key, next_value)
        return value, next_value


def _standardise(x: Tensor, eps: float = 1e-6) -> Tensor:
    return (x - x.mean()) / x.std(correction=0).clamp_min(eps)
