"""ObservationTransform: TorchRL's base class of transforms that map observations."""

from __future__ import annotations

from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg

__all__ = ["ObservationTransform"]


class ObservationTransform(Transform):
    """Base class of observation transforms: :class:`Transform` with observation key defaults.

    Subclass it as in TorchRL; with ``in_keys=None`` the transform maps ``"observation"`` and
    ``"pixels"``. Inside an env, the keys must exist (pass the ones your env has).

    Args:
        in_keys: entries to map (``None``: ``["observation", "pixels"]``).
        out_keys: where the results go (default ``in_keys``).
        in_keys_inv: keys the env below reads (inner names of the inverse map).
        out_keys_inv: keys the user writes (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Half(ObservationTransform):
        ...     def _apply_transform(self, value):
        ...         return value / 2
        >>> td = Half()(TensorDict(observation=torch.ones(2), pixels=torch.full((2,), 4.0)))
        >>> td["observation"].tolist(), td["pixels"].tolist()
        ([0.5, 0.5], [2.0, 2.0])
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        in_keys = ["observation", "pixels"] if in_keys is None else in_keys
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
