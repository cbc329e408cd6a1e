"""PixelRenderTransform: writes what the env's ``render()`` returns as a ``"pixels"`` entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms import Transform
from tdrl.specs import Composite, NonTensor, Unbounded

__all__ = ["PixelRenderTransform"]


def find_render(parent: Any, name: str) -> Callable[..., Any] | None:
    """The ``name`` method that renders ``parent``: the parent's own, else its base env's,
    else the library env a wrapper holds (``GymWrapper.env``), which TorchRL's wrappers
    reach by forwarding attributes."""
    base = getattr(parent, "base_env", parent)
    for owner in (parent, base, getattr(base, "env", None)):
        method = getattr(owner, name, None) if owner is not None else None
        if callable(method):
            return method  # type: ignore[no-any-return]
    return None


class PixelRenderTransform(Transform):
    """Calls the env's ``render()`` at every reset and step and writes the image under
    ``out_keys[0]`` (``"pixels"``), with its spec.

    An alternative to ``from_pixels`` for envs that render on demand. The render method is
    looked up on the env below the transform, then on its base env, then on the library env a
    wrapper holds (``GymEnv(..., render_mode="rgb_array")`` renders through gymnasium). The
    image becomes a tensor (a list of per-member images is stacked); a single ``[H, W, 3]``
    image of a batched env, which has no batch dims, is written as non-tensor data unless
    ``as_non_tensor`` says otherwise. The spec comes from one render when the transform is
    attached (the base env is reset first only if that render fails).

    Args:
        out_keys: the one entry to write (default ``["pixels"]``).
        preproc: applied to what ``render`` returns (crop, copy, resize...).
        as_non_tensor: write non-tensor data (True), a tensor (False), or decide from the
            first image (None).
        render_method: the method's name (default ``"render"``).
        pass_tensordict: call ``render(tensordict, **kwargs)`` (stateless envs).
        **kwargs: passed to the render method (e.g. ``mode="rgb_array"``).

    Examples:
        >>> from tdrl.envs import GymEnv
        >>> env = GymEnv("CartPole-v1", render_mode="rgb_array").append_transform(
        ...     PixelRenderTransform())
        >>> env.rollout(3)["next", "pixels"].shape
        torch.Size([3, 400, 600, 3])
    """

    def __init__(
        self,
        out_keys: list[NestedKey] | NestedKey | None = None,
        preproc: Callable[[Any], Any] | None = None,
        as_non_tensor: bool | None = None,
        render_method: str = "render",
        pass_tensordict: bool = False,
        **kwargs: Any,
    ) -> None:
        if out_keys is None:
            out_keys = ["pixels"]
        elif isinstance(out_keys, str | tuple):
            out_keys = [out_keys]
        if len(out_keys) != 1:
            raise ValueError(
                f"PixelRenderTransform.__init__: expected one out_key (got {list(out_keys)}; "
                "expected a single entry). Pass out_keys=['pixels']."
            )
        super().__init__()
        self.out_keys = list(out_keys)  # written from nothing: no in_key pairs with it
        self.preproc = preproc
        self.as_non_tensor = as_non_tensor
        self.render_method = render_method
        self.pass_tensordict = pass_tensordict
        self.kwargs = kwargs
        self._enabled = True

    # ------------------------------------------------------------------ switch
    def switch(self, mode: str | bool | None = None) -> None:
        """Turns rendering on or off (``"on"``/``"off"``/a bool; None flips it). Off, the
        transform writes nothing (the entry keeps its previous value, if any)."""
        if mode is None:
            mode = not self._enabled
        if not isinstance(mode, bool):
            if mode not in ("on", "off"):
                raise ValueError(
                    f"PixelRenderTransform.switch: unknown mode (got {mode!r}; expected 'on', "
                    "'off', True, False or None). Pass one of them."
                )
            mode = mode == "on"
        self._enabled = mode

    @property
    def enabled(self) -> bool:
        """Whether the transform renders."""
        return self._enabled

    # ------------------------------------------------------------------ rendering
    def _bind(self, parent: EnvBase) -> None:
        if find_render(parent, self.render_method) is None:
            raise ValueError(
                f"PixelRenderTransform: {type(getattr(parent, 'base_env', parent)).__name__} "
                f"cannot render (got no callable {self.render_method!r} on the env or the "
                "library env it wraps; expected one that returns an image). Use an env with a "
                "render method, e.g. GymEnv(name, render_mode='rgb_array')."
            )

    def _render(self, tensordict: TensorDictBase) -> Any:
        parent = self._require_parent("_call")
        method = find_render(parent, self.render_method)
        assert method is not None  # checked when attached
        array = method(tensordict, **self.kwargs) if self.pass_tensordict else method(**self.kwargs)
        if self.preproc is not None:
            array = self.preproc(array)
        if array is None:
            raise RuntimeError(
                f"PixelRenderTransform._call: {self.render_method}() returned None (got None; "
                "expected an image). Build the env in an image render mode, e.g. "
                "render_mode='rgb_array'."
            )
        if isinstance(array, list | tuple):
            array = np.stack([np.asarray(a) for a in array])
        if self.as_non_tensor is None:
            batched = len(parent.batch_size) > 0
            self.as_non_tensor = bool(np.ndim(array) == 3 and np.shape(array)[-1] == 3 and batched)
        return array

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._enabled:
            return tensordict
        array = self._render(tensordict)
        key = self.out_keys[0]
        if self.as_non_tensor:
            tensordict.set_non_tensor(key, array)
            return tensordict
        value = (
            array.clone() if isinstance(array, torch.Tensor) else torch.tensor(np.asarray(array))
        )
        try:
            tensordict.set(key, value)
        except (RuntimeError, ValueError) as err:
            raise RuntimeError(
                f"PixelRenderTransform._call: the rendered image does not fit the data (got "
                f"shape {tuple(value.shape)}; expected leading dims {tuple(tensordict.shape)}). "
                "Reshape it with preproc, or write it as non-tensor data (as_non_tensor=True)."
            ) from err
        return tensordict

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_out)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Adds the image's spec (``Unbounded`` of its shape and dtype, or ``NonTensor``)."""
        parent = self._require_parent("transform_observation_spec")
        probe = Composite(shape=parent.batch_size).zero()
        enabled, self._enabled = self._enabled, True
        try:
            try:
                out = self._call(probe)
            except Exception:  # some envs render only after a reset
                base = getattr(parent, "base_env", parent)
                base.reset()
                out = self._call(probe)
        finally:
            self._enabled = enabled
        value = out.get(self.out_keys[0])
        device = parent.device
        if self.as_non_tensor:
            observation_spec[self.out_keys[0]] = NonTensor(shape=parent.batch_size, device=device)
        else:
            observation_spec[self.out_keys[0]] = Unbounded(
                shape=value.shape, dtype=value.dtype, device=device
            )
        return observation_spec
