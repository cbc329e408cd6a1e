"""ActionMask: keep the mask of a discrete action spec in sync with the env's mask entry."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeyNotFoundError, show_keys
from tdrl.specs import Categorical, Composite, MultiCategorical, MultiOneHot, OneHot, TensorSpec

__all__ = ["ActionMask"]

_DISCRETE = (Categorical, OneHot, MultiCategorical, MultiOneHot)


def _mask_shape(spec: TensorSpec) -> torch.Size:
    """The mask shape of a discrete spec (True = allowed)."""
    if isinstance(spec, Categorical):
        return torch.Size((*spec.shape, spec.n))
    if isinstance(spec, MultiCategorical):
        return torch.Size((*spec.shape[:-1], sum(spec.nvec)))
    return spec.shape


class ActionMask(Transform):
    """After each reset and step, sets the action spec's mask from the env's mask entry.

    ``env.rand_action``, random policies and exploration modules sample from the action spec, so
    with this transform they only produce legal actions. The mask is a boolean entry of the
    observation (True = allowed) shaped like the action spec's mask: ``(*shape, n)`` for a
    Categorical, the spec shape for OneHot/MultiOneHot, ``(*shape[:-1], sum(nvec))`` for a
    MultiCategorical. The transform updates the action spec it exposes; transforms placed after
    it must not replace that action spec.

    Args:
        action_key: the discrete action entry.
        mask_key: the observation entry holding the mask.

    Raises:
        TypeError: the action spec is not discrete.
        ValueError: the mask spec is not boolean or its shape does not fit the action spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.envs.core import EnvBase
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.specs import Categorical, Composite
        >>> class OnlyLast(EnvBase):
        ...     def __init__(self):
        ...         super().__init__(batch_size=(2,))
        ...         self.observation_spec = Composite(
        ...             action_mask=Categorical(2, shape=(2, 3), dtype=torch.bool), shape=(2,))
        ...         self.action_spec = Categorical(3, shape=(2,))
        ...         self.reward_spec = Categorical(2, shape=(2, 1), dtype=torch.bool)
        ...         self.done_spec = self.default_done_spec()
        ...     def _reset(self, td):
        ...         mask = torch.tensor([False, False, True]).expand(2, 3)
        ...         return TensorDict(action_mask=mask, batch_size=(2,))
        ...     def _step(self, td):
        ...         out = self._reset(None)
        ...         out["reward"] = torch.ones(2, 1, dtype=torch.bool)
        ...         return out
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = TransformedEnv(OnlyLast(), ActionMask())
        >>> env.rand_action(env.reset())["action"].tolist()
        [2, 2]
    """

    def __init__(self, action_key: NestedKey = "action", mask_key: NestedKey = "action_mask"):
        super().__init__(in_keys=[mask_key])
        self.action_key = unravel_key(action_key)
        self.mask_key = unravel_key(mask_key)
        self._leaf: TensorSpec | None = None

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        leaf = action_spec.get(self.action_key, None)
        if leaf is None:
            raise KeyNotFoundError(
                f"ActionMask.action_key: {self.action_key!r} is not an action of the env below "
                f"(available keys: {show_keys(action_spec)}). Pass the discrete action key."
            )
        if not isinstance(leaf, _DISCRETE) or (
            isinstance(leaf, Categorical) and leaf.dtype is torch.bool
        ):
            raise TypeError(
                f"ActionMask.transform_action_spec: the spec of {self.action_key!r} is not a "
                f"discrete action spec (got {type(leaf).__name__}; expected Categorical, OneHot, "
                "MultiCategorical or MultiOneHot). Masks only apply to discrete actions."
            )
        parent = self._require_parent("transform_action_spec")
        mask_spec = parent.full_observation_spec.get(self.mask_key, None)
        if mask_spec is None:
            mask_spec = parent.full_state_spec[self.mask_key]
        want = _mask_shape(leaf)
        fits = mask_spec.dtype is torch.bool
        try:
            fits = fits and torch.broadcast_shapes(mask_spec.shape, want) == want
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"ActionMask.transform_action_spec: the mask {self.mask_key!r} does not fit the "
                f"action {self.action_key!r} (got shape {tuple(mask_spec.shape)} and dtype "
                f"{mask_spec.dtype}; expected a boolean mask broadcastable to {tuple(want)}). "
                "Fix the mask spec or the keys."
            )
        self._leaf = leaf.clone()
        action_spec[self.action_key] = self._leaf
        return action_spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return observation_spec

    def _update(self, mask: torch.Tensor) -> None:
        if self._leaf is None:
            raise RuntimeError(
                "ActionMask._update: the transform has no action spec yet (got no env; expected "
                "a transform attached to a TransformedEnv). Wrap the env first."
            )
        self._leaf.update_mask(mask)  # type: ignore[attr-defined]

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        mask = tensordict_out.get(self.mask_key, None)
        if mask is None:
            raise self._missing_key(self.mask_key, tensordict_out, "_reset")
        self._update(self._where_reset(tensordict_in, self.mask_key, mask))
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        mask = next_tensordict.get(self.mask_key, None)
        if mask is None:
            raise self._missing_key(self.mask_key, next_tensordict, "_step")
        self._update(mask)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def extra_repr(self) -> str:
        return f"action_key={self.action_key!r}, mask_key={self.mask_key!r}"
