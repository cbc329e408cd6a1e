"""VecNorm: normalisation by running (decayed) statistics of the data seen so far."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Composite, Unbounded

__all__ = ["VecNorm"]


class VecNorm(Transform):
    """Normalises entries by a running mean and variance: ``(x - mean) / sqrt(var + eps)``.

    Per entry and feature (the dims after the env batch dims; agents keep their own
    statistics) the transform keeps decayed sums ``S = decay * S + sum(x)``,
    ``Q = decay * Q + sum(x ** 2)`` and counts ``N = decay * N + n`` over the batch, updated
    with every step's data and, on reset, with the data of the members (groups, agents) that
    reset only; ``mean = S / N`` and ``var = Q / N - mean ** 2``. Each value is normalised
    with the statistics that include it. Frozen, the statistics do not change. The statistics
    (float64) are in ``state_dict``. Outside an env, :meth:`forward` normalises without
    updating.

    Args:
        in_keys: entries to normalise.
        out_keys: where the results go (default: in place).
        decay: weight of the past (1.0: plain running averages).
        eps: added to the variance.
        frozen: start frozen.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv((16,)), VecNorm(out_keys="normed", decay=1.0))
        >>> td = env.rollout(3)
        >>> env.transform[0].count_0.tolist()  # 16 rows at the reset, then 16 per step
        [64.0, 64.0, 64.0]
        >>> td["next", "normed"].shape, env.transform[0].freeze().frozen
        (torch.Size([16, 3, 3]), True)
    """

    def __init__(
        self,
        in_keys: KeysArg = "observation",
        out_keys: KeysArg = None,
        *,
        decay: float = 0.9999,
        eps: float = 1e-4,
        frozen: bool = False,
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if not 0.0 < decay <= 1.0:
            raise ValueError(
                f"VecNorm.__init__: decay must be in (0, 1] (got {decay}; expected e.g. 0.9999)."
                " Pass a decay in (0, 1]."
            )
        self.decay = float(decay)
        self.eps = float(eps)
        self.frozen = frozen
        self._batch_ndim = 0
        for i in range(len(self.in_keys)):
            for name in ("sum", "sumsq", "count"):
                self.register_buffer(f"{name}_{i}", None)

    def freeze(self) -> VecNorm:
        """Stops updating the statistics (evaluation); returns ``self``.

        Examples:
            >>> VecNorm().freeze().frozen
            True
        """
        self.frozen = True
        return self

    def unfreeze(self) -> VecNorm:
        """Updates the statistics again; returns ``self``.

        Examples:
            >>> VecNorm(frozen=True).unfreeze().frozen
            False
        """
        self.frozen = False
        return self

    def _bind(self, parent: EnvBase) -> None:
        self._batch_ndim = len(parent.batch_size)
        for i, key in enumerate(self.in_keys):
            leaf = parent.full_observation_spec.get(key, None)
            if leaf is None or getattr(self, f"sum_{i}") is not None:
                continue
            shape = leaf.shape[self._batch_ndim :]
            for name in ("sum", "sumsq", "count"):
                setattr(self, f"{name}_{i}", torch.zeros(shape, dtype=torch.float64))

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            leaf = observation_spec.get(in_key, None)
            if leaf is not None:
                dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.float32
                observation_spec[out_key] = Unbounded(leaf.shape, leaf.device, dtype=dtype)
        return observation_spec

    # ------------------------------------------------------------------ statistics
    def _stats(self, i: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count = getattr(self, f"count_{i}")
        if count is None:
            raise RuntimeError(
                f"VecNorm._stats: no statistics for {self.in_keys[i]!r} yet (got none; expected a"
                " transform attached to an env or a loaded state dict). Attach it to an env."
            )
        n = count.clamp_min(1e-12)
        mean = getattr(self, f"sum_{i}") / n
        var = (getattr(self, f"sumsq_{i}") / n - mean**2).clamp_min(0.0)
        seen = count > 0
        mean = torch.where(seen, mean, 0.0)
        var = torch.where(seen, var, 1.0)
        return mean.to(like.device), var.to(like.device)

    def _update(self, i: int, value: torch.Tensor, mask: torch.Tensor | None) -> None:
        if self.frozen or (mask is not None and not bool(mask.any())):
            return
        lead = value.ndim - getattr(self, f"sum_{i}").ndim
        dims = tuple(range(lead))
        x = value.double()
        if mask is None:
            weight = torch.ones((), dtype=torch.float64, device=x.device).expand(x.shape)
        else:
            weight = mask.to(torch.float64).expand(x.shape)
        s, q, n = x * weight, x * x * weight, weight
        if dims:  # sum over the batch dims (``sum(())`` would reduce every dim)
            s, q, n = s.sum(dims), q.sum(dims), n.sum(dims)
        for name, new in (("sum", s), ("sumsq", q), ("count", n)):
            old = getattr(self, f"{name}_{i}")
            setattr(self, f"{name}_{i}", old * self.decay + new.to(old.device))

    def _normalize(self, i: int, value: torch.Tensor) -> torch.Tensor:
        mean, var = self._stats(i, value)
        dtype = value.dtype if value.dtype.is_floating_point else torch.float32
        return ((value.double() - mean) / (var + self.eps).sqrt()).to(dtype)

    # ------------------------------------------------------------------ data hooks
    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            value = tensordict.get(in_key, None)
            if value is None:
                raise self._missing_key(in_key, tensordict, "_call")
            self._update(i, value, None)
            tensordict.set(out_key, self._normalize(i, value))
        return tensordict

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            value = tensordict_out.get(in_key, None)
            if value is None:
                raise self._missing_key(in_key, tensordict_out, "_reset")
            self._update(i, value, self._reset_mask(tensordict_in, in_key, value))
            new = self._normalize(i, value)
            tensordict_out.set(out_key, self._where_reset(tensordict_in, out_key, new))
        return tensordict_out

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Normalises the keys as given with the current statistics, without updating them."""
        values = []
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if value is None:
                raise self._missing_key(key, tensordict, "forward")
            values.append(value)
        for i, (out_key, value) in enumerate(zip(self.out_keys, values)):
            tensordict.set(out_key, self._normalize(i, value))
        return tensordict

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for i in range(len(self.in_keys)):
            for name in ("sum", "sumsq", "count"):
                full = f"{prefix}{name}_{i}"
                if getattr(self, f"{name}_{i}") is None and full in state_dict:
                    setattr(self, f"{name}_{i}", torch.empty_like(state_dict[full]))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def extra_repr(self) -> str:
        return f"decay={self.decay}, eps={self.eps}, frozen={self.frozen}, {super().extra_repr()}"
