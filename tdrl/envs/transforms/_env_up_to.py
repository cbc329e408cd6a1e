"""EnvUpTo: the env below a transform of a TransformedEnv (what ``Transform.parent`` returns)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs.core import EnvBase
from tdrl.specs import Composite

__all__ = ["EnvUpTo"]


class EnvUpTo(EnvBase):
    """The env up to transform ``n`` of a TransformedEnv (what ``Transform.parent`` returns).

    It shares the base env and the transform objects with its owner and uses the owner's specs
    of that stage; running it runs the first ``n`` transforms.
    """

    def __init__(self, owner: Any, n: int, specs: dict[str, Composite]) -> None:
        self._owner = owner
        self._n = n
        base = owner.base_env
        super().__init__(
            batch_size=base.batch_size,
            device=base.device,
            allow_done_after_reset=base.allow_done_after_reset,
            validate=base.validate,
        )
        self._specs = dict(specs)
        device = specs["done"].device
        self.device = device if device is not None else base.device
        self._refresh_keys()

    @property
    def base_env(self) -> EnvBase:
        """The owner's base env."""
        return self._owner.base_env

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        return self._owner._run_reset(tensordict, self._n)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._owner._run_step(tensordict, self._n)

    def _merge_reset(
        self, old: TensorDictBase, new: TensorDictBase, masks: list[torch.Tensor | None]
    ) -> TensorDictBase:
        return old.update(new)

    def _set_seed(self, seed: int | None) -> int | None:
        return self._owner.base_env.set_seed(seed)

    def __repr__(self) -> str:
        names = ", ".join(type(t).__name__ for t in self._owner._flat[: self._n])
        return f"EnvUpTo(env={type(self.base_env).__name__}, transforms=[{names}])"
