"""CatFrames: stack the last N frames of an entry along a dim."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import (
    KeyNotFoundError,
    KeysArg,
    broadcast_mask,
    key_prefix,
    show_keys,
)
from tdrl.specs import Bounded, TensorSpec, Unbounded

__all__ = ["CatFrames"]


class CatFrames(Transform):
    """Concatenates the last ``N`` frames of each entry along ``dim`` (oldest first).

    After a reset the stack is padded with the first frame (``padding="same"``) or with
    ``padding_value`` (``"constant"``), per done group: only the members, groups and agents
    whose ``_reset`` is true restart their stack. The frames of the running episodes are kept
    in the transform (not sent through batched envs); a reset reloads them from the input's
    stacked entry when it has one.

    Outside an env, :meth:`forward` stacks the frames of a trajectory (the last batch dim is
    time; episodes start where the previous step's ``("next", "done")`` of the entry's group,
    or of a group above it, is true). Keys are taken as given, as in TorchRL: name
    ``("next", k)`` too to stack the next frames (with ``k`` also named, they are exactly what
    the env would have produced).

    Args:
        N: number of frames.
        dim: the (negative) dim to concatenate along, e.g. ``-3`` for ``[C, H, W]`` images.
        in_keys: entries to stack (``None``: ``"pixels"``).
        out_keys: where the stacks go (default: in place).
        padding: ``"same"`` or ``"constant"``.
        padding_value: the value of ``"constant"`` padding.
        as_inverse: must stay ``False`` (stacking on the inverse side is not supported).
        reset_key: the ``_reset`` key that restarts every stack (default: per entry, the done
            group that owns it).
        done_key: outside an env, episodes start after ``("next", done_key)`` is true
            (default: the ``"done"`` leaves of the entry's group and the groups above it).
        future: must stay ``False`` (windows of upcoming frames are not supported).
        mask_key: must stay ``None`` (no padding mask is written).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=9), CatFrames(3, -1, "observation", "stack"))
        >>> env.rollout(3)["next", "stack"].tolist()
        [[0.0, 0.0, 1.0], [0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    """

    def __init__(
        self,
        N: int,
        dim: int,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        padding: str = "same",
        padding_value: float = 0,
        as_inverse: bool = False,
        reset_key: NestedKey | None = None,
        done_key: NestedKey | None = None,
        future: bool = False,
        mask_key: NestedKey | None = None,
    ) -> None:
        for name, value, default in (
            ("as_inverse", as_inverse, False),
            ("future", future, False),
            ("mask_key", mask_key, None),
        ):
            if value is not default and value != default:
                raise NotImplementedError(
                    f"CatFrames.__init__: {name} is not supported (got {name}={value!r}; "
                    f"expected {default!r}). Drop {name}: tdrl stacks past frames, forward only."
                )
        super().__init__(in_keys="pixels" if in_keys is None else in_keys, out_keys=out_keys)
        if N < 1 or dim >= 0 or padding not in ("same", "constant"):
            raise ValueError(
                f"CatFrames.__init__: bad arguments (got N={N}, dim={dim}, padding={padding!r}; "
                "expected N >= 1, a negative dim and padding 'same' or 'constant'). Fix them."
            )
        self.N = int(N)
        self.dim = dim
        self.padding = padding
        self.padding_value = float(padding_value)
        self.reset_key = None if reset_key is None else unravel_key(reset_key)
        self.done_key = None if done_key is None else unravel_key(done_key)
        self._frames: dict[int, torch.Tensor] = {}

    def _bind(self, parent: EnvBase) -> None:
        if self.reset_key is not None and self.reset_key not in parent.reset_keys:
            raise KeyNotFoundError(
                f"CatFrames: reset_key {self.reset_key!r} is not a reset key of the env "
                f"(available keys: {show_keys(parent.reset_keys)}). Pass one of them or None."
            )

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        shape = torch.cat([torch.empty(spec.shape, device="meta")] * self.N, self.dim).shape
        if isinstance(spec, Bounded):
            low, high = spec.low, spec.high
            if self.padding == "constant":
                low, high = low.clamp(max=self.padding_value), high.clamp(min=self.padding_value)
            low = torch.cat([low] * self.N, self.dim)
            high = torch.cat([high] * self.N, self.dim)
            return Bounded(
                low, high, shape=shape, device=spec.device, dtype=spec.dtype or low.dtype
            )
        return Unbounded(shape, spec.device, dtype=spec.dtype or torch.float32)

    def _first_stack(self, frame: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            return torch.cat([frame] * self.N, self.dim)
        pad = torch.full_like(frame, self.padding_value)
        return torch.cat([pad] * (self.N - 1) + [frame], self.dim)

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            frame = tensordict_out.get(in_key, None)
            if frame is None:
                raise self._missing_key(in_key, tensordict_out, "_reset")
            first = self._first_stack(frame)
            mask = self._reset_mask(tensordict_in, in_key, first, reset_key=self.reset_key)
            prev = tensordict_in.get(out_key, None) if tensordict_in is not None else None
            if prev is None or prev.shape != first.shape:
                prev = self._frames.get(i)
            if mask is None or prev is None or prev.shape != first.shape:
                stack = first
            else:
                stack = torch.where(mask, first, prev.to(first.device))
            self._frames[i] = stack
            tensordict_out.set(out_key, stack)
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            frame = next_tensordict.get(in_key, None)
            if frame is None:
                raise self._missing_key(in_key, next_tensordict, "_step")
            stack = self._frames.get(i)
            size = frame.shape[self.dim]
            if stack is None or stack.shape[self.dim] != size * self.N:
                raise RuntimeError(
                    f"CatFrames._step: no frames for {in_key!r} (got "
                    f"{None if stack is None else tuple(stack.shape)}; expected a stack from a "
                    "previous reset). Reset the env before stepping it."
                )
            stack = torch.cat([stack.narrow(self.dim, size, size * (self.N - 1)), frame], self.dim)
            self._frames[i] = stack
            next_tensordict.set(out_key, stack)
        return next_tensordict

    # ------------------------------------------------------------------ trajectories
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Stacks the frames of a trajectory whose last batch dim is time (see class doc).

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> td = TensorDict(obs=torch.arange(4.0).reshape(4, 1),
            ...     next=TensorDict(obs=torch.arange(1.0, 5.0).reshape(4, 1),
            ...         done=torch.tensor([[False], [True], [False], [False]])), batch_size=[4])
            >>> out = CatFrames(2, -1, ["obs", ("next", "obs")])(td)
            >>> out["obs"].tolist(), out["next", "obs"].tolist()
            ([[0.0, 0.0], [0.0, 1.0], [2.0, 2.0], [2.0, 3.0]], [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0]])
        """
        if tensordict.ndim == 0:
            raise ValueError(
                "CatFrames.forward: the data has no time dim (got batch size (); expected the "
                "last batch dim to be time). Pass a trajectory, e.g. a rollout."
            )
        t_dim = tensordict.ndim - 1
        frames = {}
        for in_key in self.in_keys:  # every input is read before any stack is written
            value = tensordict.get(in_key, None)
            if value is None:
                raise self._missing_key(in_key, tensordict, "forward")
            frames[in_key] = value
        stacks: dict[NestedKey, torch.Tensor] = {}
        for in_key in sorted(self.in_keys, key=lambda k: _under_next(k) is not None):
            inner = _under_next(in_key)
            if inner is not None and inner in stacks:  # shift the root stack by one frame
                size = frames[in_key].shape[self.dim]
                shifted = stacks[inner].narrow(self.dim, size, size * (self.N - 1))
                stacks[in_key] = torch.cat([shifted, frames[in_key]], self.dim)
                continue
            prefix_key = in_key if inner is None else inner
            starts = self._episode_starts(tensordict, prefix_key, frames[in_key].ndim, t_dim)
            stacks[in_key] = self._unfold(frames[in_key], starts, t_dim)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            tensordict.set(out_key, stacks[in_key])
        return tensordict

    def _episode_starts(
        self, tensordict: TensorDictBase, key: NestedKey, ndim: int, t_dim: int
    ) -> torch.Tensor:
        prefix = key_prefix(key)
        starts: torch.Tensor | None = None
        if self.done_key is not None:
            names = self.done_key if isinstance(self.done_key, tuple) else (self.done_key,)
            candidates = [("next", *names)]
            if tensordict.get(candidates[0], None) is None:
                raise self._missing_key(candidates[0], tensordict, "forward")
        else:
            candidates = [("next", *prefix[:d], "done") for d in range(len(prefix) + 1)]
        for done_key in candidates:
            done = tensordict.get(done_key, None)
            if done is None:
                continue
            first = torch.ones_like(done.narrow(t_dim, 0, 1))
            start = torch.cat([first, done.narrow(t_dim, 0, done.shape[t_dim] - 1)], t_dim)
            start = broadcast_mask(start, t_dim + 1, ndim)
            starts = start if starts is None else starts | start
        if starts is None:
            size = tensordict.shape[t_dim]
            starts = torch.arange(size, device=tensordict.device) == 0
            starts = starts.reshape(*([1] * t_dim), size, *([1] * (ndim - t_dim - 1)))
        return starts

    def _unfold(self, frames: torch.Tensor, starts: torch.Tensor, t_dim: int) -> torch.Tensor:
        size = frames.shape[t_dim]
        steps = torch.arange(size, device=frames.device)
        steps = steps.reshape(*([1] * t_dim), size, *([1] * (starts.ndim - t_dim - 1)))
        episode_start = torch.cummax(torch.where(starts, steps, 0), t_dim).values
        stack = []
        for k in range(self.N):
            back = steps - (self.N - 1 - k)
            index = torch.maximum(back, episode_start)
            frame = torch.gather(frames, t_dim, index.expand(frames.shape))
            if self.padding == "constant":
                pad = torch.full((), self.padding_value, dtype=frame.dtype, device=frame.device)
                frame = torch.where(back >= episode_start, frame, pad)
            stack.append(frame)
        return torch.cat(stack, self.dim)

    def extra_repr(self) -> str:
        return f"N={self.N}, dim={self.dim}, padding={self.padding!r}, {super().extra_repr()}"


def _under_next(key: NestedKey) -> NestedKey | None:
    """``k`` for ``("next", *k)``, else ``None``."""
    if isinstance(key, tuple) and len(key) > 1 and key[0] == "next":
        return key[1] if len(key) == 2 else key[1:]
    return None
