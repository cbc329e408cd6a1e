"""VecNorm: normalisation by running (decayed) statistics of the data seen so far."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._compose import Compose
from tdrl.envs.transforms._obs_norm import ObservationNorm
from tdrl.envs.transforms._utils import KeysArg
from tdrl.envs.transforms._vec_norm_state import STATS, export_stats, import_stats, out_dtype
from tdrl.specs import Composite, Unbounded

__all__ = ["VecNorm"]


class VecNorm(Transform):
    """Normalises entries by a running mean and std: ``(x - loc) / scale`` (TorchRL's formula).

    Per entry and feature (the dims after the env batch dims; agents keep their own
    statistics) the transform keeps decayed sums ``S = decay * S + sum(x)``,
    ``Q = decay * Q + sum(x ** 2)`` and counts ``N = decay * N + n`` over the batch, updated
    with every step's data and with every reset's data, as in TorchRL: a reset updates them
    with every row, so on a partial reset the rows that do not reset count their current
    (last stepped) value once more, while their normalised output stays the one they had;
    ``loc = S / N`` and ``scale = sqrt(max(Q / N - loc ** 2, eps))`` (then at least ``eps``),
    as in TorchRL. Each value is normalised with the statistics that include it. Frozen, the
    statistics do not change. :attr:`loc` and :attr:`scale` give them as
    TensorDicts keyed by the ``in_keys``, and :meth:`to_observation_norm` a fixed
    :class:`ObservationNorm` for evaluation envs.

    ``state_dict()`` holds TorchRL's entry ``"_extra_state"``: a dict with
    ``"<key>_sum"``, ``"<key>_ssq"`` and ``"<key>_count"`` per entry (nested keys joined with
    ``"-<.>-"``), kept in float64 with per-feature counts; TorchRL's float32 values and
    one-element counts load too. Outside an env, :meth:`forward` does the same on the keys
    as given, as in TorchRL: it updates the statistics (unless frozen), then normalises; the
    first call sizes them from the data (the dims after the tensordict's batch dims).

    Args:
        in_keys: entries to normalise (``None``: ``"observation"`` and ``"reward"``, as in
            TorchRL, keeping those the env, or the data, has).
        out_keys: where the results go (default: in place).
        shared_td: must stay ``None`` (statistics shared between processes through a
            tensordict are not supported; a batched env runs one transform for all workers).
        lock: must stay ``None`` (it guards ``shared_td``).
        decay: weight of the past (1.0: plain running averages).
        eps: added to the variance.
        shapes: the shape of the statistics of each entry, the trailing dims of the entry
            (default: every dim after the batch dims); the leading dims are summed over.
        new_api: must stay ``None`` or ``False`` (TorchRL's ``VecNormV2`` is not provided).
        frozen: start frozen (keyword-only).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv((16,)), VecNorm("observation", "normed", decay=1.0))
        >>> td = env.rollout(3)
        >>> state = env.state_dict()["_extra_state"]
        >>> state["observation_count"].tolist()  # 16 rows at the reset, then 16 per step
        [64.0]
        >>> td["next", "normed"].shape, env.transform.loc["observation"].shape
        (torch.Size([16, 3, 3]), torch.Size([3]))
        >>> env.transform.freeze().frozen
        True
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        shared_td: Any = None,
        lock: Any = None,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shapes: Sequence[Sequence[int]] | None = None,
        new_api: bool | None = None,
        *,
        frozen: bool = False,
    ) -> None:
        for name, value in (("shared_td", shared_td), ("lock", lock)):
            if value is not None:
                raise NotImplementedError(
                    f"VecNorm.__init__: {name} is not supported (got {type(value).__name__}; "
                    f"expected None). Drop {name}: put VecNorm on the batched env, where one "
                    "transform sees every worker's data."
                )
        if new_api:
            raise NotImplementedError(
                "VecNorm.__init__: TorchRL's VecNormV2 is not provided (got new_api=True; "
                "expected None or False). Drop new_api."
            )
        self._auto = in_keys is None
        if self._auto and out_keys is not None:
            raise ValueError(
                f"VecNorm.__init__: out_keys needs in_keys (got in_keys=None, out_keys="
                f"{out_keys!r}; expected explicit in_keys). Pass in_keys too."
            )
        super().__init__(["observation", "reward"] if self._auto else in_keys, out_keys)
        self._paired("__init__")  # one statistic and one output per key
        if not 0.0 < decay <= 1.0:
            raise ValueError(
                f"VecNorm.__init__: decay must be in (0, 1] (got {decay}; expected e.g. 0.9999)."
                " Pass a decay in (0, 1]."
            )
        if shapes is not None and len(shapes) != len(self.in_keys):
            raise ValueError(
                f"VecNorm.__init__: one shape per in_key is needed (got {len(shapes)} shapes for "
                f"in_keys={self.in_keys}). Pass as many shapes as keys."
            )
        self.decay = float(decay)
        self.eps = float(eps)
        self.shapes = None if shapes is None else [torch.Size(s) for s in shapes]
        self.frozen = frozen
        self._batch_ndim = 0
        self._dtypes: dict[int, torch.dtype] = {}
        # the last un-normalised value of each entry (a reference, no copy): on a partial reset
        # the rows that do not reset count it again, as TorchRL's reset counts every row
        self._last: dict[int, torch.Tensor] = {}
        for i in range(len(self.in_keys)):
            for name in STATS:
                # not persistent: the state dict holds them under TorchRL's names (_extra_state)
                self.register_buffer(f"{name}_{i}", None, persistent=False)

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
        specs = (parent.full_observation_spec, parent.full_reward_spec)
        if self._auto:  # TorchRL's default keys, kept where the env has them
            keep = [i for i, k in enumerate(self.in_keys) if any(k in s for s in specs)]
            self._keep_keys(keep)
        for i, key in enumerate(self.in_keys):
            leaf = next((s[key] for s in specs if key in s), None)
            if leaf is not None and getattr(self, f"sum_{i}") is None:
                self._init_stats(i, leaf.shape[self._batch_ndim :], leaf.dtype)

    def _keep_keys(self, keep: list[int]) -> None:
        """Keeps the keys (and their statistics) at ``keep``, renumbering the buffers."""
        stats = [[getattr(self, f"{n}_{i}") for n in STATS] for i in keep]
        dtypes = {j: self._dtypes[i] for j, i in enumerate(keep) if i in self._dtypes}
        for i in range(len(self.in_keys)):
            for name in STATS:
                delattr(self, f"{name}_{i}")
        self.in_keys = [self.in_keys[i] for i in keep]
        self.out_keys = [self.out_keys[i] for i in keep]
        self._dtypes = dtypes
        self._last = {}
        for j, values in enumerate(stats):
            for name, value in zip(STATS, values):
                self.register_buffer(f"{name}_{j}", value, persistent=False)

    def _init_stats(self, i: int, feature_shape: torch.Size, dtype: torch.dtype | None) -> None:
        shape = (
            feature_shape if self.shapes is None else self._shape(i, self.shapes[i], feature_shape)
        )
        for name in STATS:
            setattr(self, f"{name}_{i}", torch.zeros(shape, dtype=torch.float64))
        self._dtypes[i] = out_dtype(dtype)

    def _shape(self, i: int, shape: torch.Size, feature_shape: torch.Size) -> torch.Size:
        if (
            len(shape) > len(feature_shape)
            or feature_shape[len(feature_shape) - len(shape) :] != shape
        ):
            raise ValueError(
                f"VecNorm: shapes[{i}] is not a trailing part of {self.in_keys[i]!r} (got "
                f"{tuple(shape)} for feature shape {tuple(feature_shape)}; expected its last "
                "dims). Fix shapes."
            )
        return shape

    def _map_specs(self, spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            leaf = spec.get(in_key, None)
            if leaf is not None:
                dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.float32
                spec[out_key] = Unbounded(leaf.shape, leaf.device, dtype=dtype)
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._map_specs(observation_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._map_specs(reward_spec)

    # ------------------------------------------------------------------ statistics
    def _stats(self, i: int, method: str = "_stats") -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)`` of entry ``i`` (float64): TorchRL's mean and clamped std; entries
        never seen (count 0) get ``(0, 1)``."""
        count = getattr(self, f"count_{i}")
        if count is None:
            raise RuntimeError(
                f"VecNorm.{method}: no statistics for {self.in_keys[i]!r} yet (got none; "
                "expected a transform attached to an env, data seen or a loaded state dict). "
                "Attach it to an env or load a state dict."
            )
        n = count.clamp_min(1e-12)
        mean = getattr(self, f"sum_{i}") / n
        std = (getattr(self, f"sumsq_{i}") / n - mean**2).clamp_min(self.eps).sqrt()
        seen = count > 0
        mean = torch.where(seen, mean, 0.0)
        std = torch.where(seen, std.clamp_min(self.eps), 1.0)
        return mean, std

    def _update(self, i: int, value: torch.Tensor) -> None:
        if self.frozen:
            return
        lead = value.ndim - getattr(self, f"sum_{i}").ndim
        dims = tuple(range(lead))
        x = value.double()
        s, q = x, x * x
        n = torch.ones((), dtype=torch.float64, device=x.device).expand(x.shape)
        if dims:  # sum over the batch dims (``sum(())`` would reduce every dim)
            s, q, n = s.sum(dims), q.sum(dims), n.sum(dims)
        for name, new in (("sum", s), ("sumsq", q), ("count", n)):
            old = getattr(self, f"{name}_{i}")
            setattr(self, f"{name}_{i}", old * self.decay + new.to(old.device))

    def _normalize(self, i: int, value: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(i)
        dtype = value.dtype if value.dtype.is_floating_point else torch.float32
        out = (value.double() - mean.to(value.device)) / std.to(value.device)
        return out.to(dtype)

    # ------------------------------------------------------------------ data hooks
    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            value = tensordict.get(in_key, None)
            if value is None:
                raise self._missing_key(in_key, tensordict, "_call")
            self._update(i, value)
            self._last[i] = value
            tensordict.set(out_key, self._normalize(i, value))
        return tensordict

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        rewards = self._require_parent("_reset").full_reward_spec
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            value = tensordict_out.get(in_key, None)
            if value is None and in_key in rewards:
                continue  # rewards do not exist after a reset
            if value is None:
                raise self._missing_key(in_key, tensordict_out, "_reset")
            self._update(i, self._reset_rows(i, tensordict_in, in_key, value))
            new = self._normalize(i, value)
            tensordict_out.set(out_key, self._where_reset(tensordict_in, out_key, new))
        return tensordict_out

    def _reset_rows(
        self, i: int, tensordict_in: TensorDictBase | None, key: Any, value: torch.Tensor
    ) -> torch.Tensor:
        """What a reset adds to the statistics of entry ``i``: every row, as in TorchRL. Rows
        that do not reset add their current value: the last one stepped (``value`` may hold
        another transform's kept output there), or ``value`` before any step."""
        mask = self._reset_mask(tensordict_in, key, value)
        last = self._last.get(i)
        if mask is not None and last is not None and last.shape == value.shape:
            value = torch.where(mask, value, last.to(value.device))
        self._last[i] = value
        return value

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Updates the statistics with the keys as given (unless frozen), then normalises them.

        As in TorchRL, the statistics grow with every call; :meth:`freeze` first to only
        normalise. With the default keys, absent ones are skipped.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> t = VecNorm("x", decay=1.0)
            >>> _ = t(TensorDict(x=torch.tensor([[1.0], [3.0]]), batch_size=[2]))
            >>> t.loc["x"].tolist(), t.scale["x"].tolist()
            ([2.0], [1.0])
        """
        values = []
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if value is None and not self._auto:
                raise self._missing_key(key, tensordict, "forward")
            values.append(value)
        for i, (out_key, value) in enumerate(zip(self.out_keys, values)):
            if value is None:
                continue
            if getattr(self, f"count_{i}") is None:
                self._init_stats(i, value.shape[tensordict.batch_dims :], value.dtype)
            self._update(i, value)
            tensordict.set(out_key, self._normalize(i, value))
        return tensordict

    # ------------------------------------------------------------------ TorchRL's views
    @property
    def standard_normal(self) -> bool:
        """Always ``True``: ``loc``/``scale`` standardise, ``(x - loc) / scale`` (TorchRL)."""
        return True

    @property
    def loc(self) -> TensorDict:
        """The running means, one entry per ``in_key`` (TorchRL's property).

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> t = VecNorm("x", decay=1.0)
            >>> _ = t(TensorDict(x=torch.tensor([[1.0], [3.0]]), batch_size=[2]))
            >>> t.loc["x"].tolist(), t.scale["x"].tolist()
            ([2.0], [1.0])
        """
        return self._view(0, "loc")

    @property
    def scale(self) -> TensorDict:
        """The running stds, ``sqrt(max(var, eps))``, one entry per ``in_key`` (TorchRL)."""
        return self._view(1, "scale")

    def _view(self, which: int, name: str) -> TensorDict:
        out = TensorDict()
        for i, key in enumerate(self.in_keys):
            value = self._stats(i, name)[which]
            out.set(key, value.to(self._dtypes.get(i, torch.float32)))
        return out

    def to_observation_norm(self) -> Transform:
        """A fixed :class:`ObservationNorm` with today's ``loc``/``scale`` (TorchRL): an
        ObservationNorm per key, in a Compose when there are several.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> t = VecNorm("x", decay=1.0)
            >>> _ = t(TensorDict(x=torch.tensor([[1.0], [3.0]]), batch_size=[2]))
            >>> fixed = t.to_observation_norm()
            >>> fixed(TensorDict(x=torch.tensor([[4.0]]), batch_size=[1]))["x"].tolist()
            [[2.0]]
        """
        loc, scale = self.loc, self.scale
        norms = [
            ObservationNorm(loc.get(k), scale.get(k), in_keys=k, out_keys=o, standard_normal=True)
            for k, o in zip(self.in_keys, self.out_keys)
        ]
        return norms[0] if len(norms) == 1 else Compose(*norms)

    def denorm(self, tensordict: TensorDictBase) -> TensorDictBase:
        """A shallow copy of ``tensordict`` where each ``in_key`` holds its ``out_key``
        mapped back, ``value * scale + loc`` (TorchRL; absent ``out_keys`` are skipped).

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> t = VecNorm("x", "n", decay=1.0)
            >>> td = t(TensorDict(x=torch.tensor([[1.0], [3.0]]), batch_size=[2]))
            >>> t.denorm(td.exclude("x"))["x"].flatten().tolist()
            [1.0, 3.0]
        """
        out = tensordict.copy()
        loc, scale = self.loc, self.scale
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = out.get(out_key, None)
            if value is not None:
                out.set(in_key, value * scale.get(in_key) + loc.get(in_key))
        return out

    # ------------------------------------------------------------------ state dict
    def get_extra_state(self) -> dict[str, torch.Tensor] | None:
        """The statistics under TorchRL's names (``state_dict()["_extra_state"]``)."""
        return export_stats(self)

    def set_extra_state(self, state: Any) -> None:
        """Loads statistics saved by :meth:`get_extra_state` or by TorchRL's VecNorm."""
        import_stats(self, state)

    def extra_repr(self) -> str:
        return f"decay={self.decay}, eps={self.eps}, frozen={self.frozen}, {super().extra_repr()}"
