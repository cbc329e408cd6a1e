"""Compose: a plain sequence of transforms applied in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tensordict import TensorDictBase
from torch import nn

from tdrl.envs.transforms._base import Transform
from tdrl.specs import Composite

__all__ = ["Compose"]


class Compose(Transform):
    """A sequence of transforms, applied in order (the action side in reverse order).

    Inside a :class:`TransformedEnv` the sequence is flattened: every transform sees the env up
    to itself as its ``parent``. Changing the sequence of an attached Compose (``append``,
    ``insert``, ``pop``, ``del``) makes the env recompute its specs.

    Args:
        *transforms: the transforms, in the order they apply to the env's output; as in
            TorchRL, also one list of them, or ``transforms=[...]``.

    Examples:
        >>> from tdrl.envs.transforms import RewardSum, StepCounter, TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> t = Compose(StepCounter(), RewardSum())
        >>> len(t), type(t[0]).__name__
        (2, 'StepCounter')
        >>> td = TransformedEnv(CountingEnv(max_steps=3), t).rollout(5)
        >>> td["next", "step_count"].flatten().tolist(), td["next", "episode_reward"][-1].item()
        ([1, 2, 3], 3.0)
    """

    def __init__(self, *transforms: Transform | list[Transform], **kwargs: Any) -> None:
        super().__init__()
        given: Any = transforms
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            given = transforms[0]  # TorchRL: Compose([t1, t2])
        elif not transforms and "transforms" in kwargs:
            given = kwargs.pop("transforms")  # TorchRL: Compose(transforms=[t1, t2])
        if kwargs:
            raise TypeError(
                f"Compose.__init__: unexpected keyword arguments (got {sorted(kwargs)}; expected "
                "the transforms, positionally, as one list, or as transforms=[...])."
            )
        for t in given:
            self._check_type(t, "__init__")
        self.transforms = nn.ModuleList(list(given))

    def _check_type(self, t: Any, method: str) -> None:
        if not isinstance(t, Transform):
            raise TypeError(
                f"Compose.{method}: expected a Transform (got {type(t).__name__}). Wrap your "
                "function in a Transform subclass."
            )

    # ------------------------------------------------------------------ sequence
    def __len__(self) -> int:
        return len(self.transforms)

    def __iter__(self) -> Iterator[Transform]:
        return iter(self._items())

    def _items(self) -> list[Transform]:
        return list(self.transforms)  # type: ignore[arg-type]

    def __getitem__(self, index: int | slice) -> Any:
        """The transform at ``index``; a slice gives a new Compose of the same objects."""
        if isinstance(index, slice):
            return Compose(*self.transforms[index])
        return self.transforms[index]

    def __delitem__(self, index: int) -> None:
        self.pop(index)

    def append(self, transform: Transform) -> Compose:
        """Appends a transform (the env that holds this Compose recomputes its specs).

        Examples:
            >>> from tdrl.envs.transforms import InitTracker, StepCounter
            >>> len(Compose(StepCounter()).append(InitTracker()))
            2
        """
        self._check_type(transform, "append")
        transform.eval()  # TorchRL: transforms join a chain in eval mode
        self.transforms.append(transform)
        self._changed()
        return self

    def insert(self, index: int, transform: Transform) -> Compose:
        """Inserts a transform before position ``index``.

        Examples:
            >>> from tdrl.envs.transforms import InitTracker, StepCounter
            >>> type(Compose(StepCounter()).insert(0, InitTracker())[0]).__name__
            'InitTracker'
        """
        self._check_type(transform, "insert")
        transform.eval()
        self.transforms.insert(index, transform)
        self._changed()
        return self

    def pop(self, index: int = -1) -> Transform:
        """Removes and returns the transform at ``index`` (it is detached from the env).

        Examples:
            >>> from tdrl.envs.transforms import InitTracker, StepCounter
            >>> t = Compose(StepCounter(), InitTracker())
            >>> type(t.pop()).__name__, len(t)
            ('InitTracker', 1)
        """
        items = list(self.transforms)
        out = items.pop(index)
        self.transforms = nn.ModuleList(items)
        self._changed()
        for node in _nodes(out):  # type: ignore[arg-type]
            node._detach()
        return out  # type: ignore[return-value]

    def leaves(self) -> list[Transform]:
        """The non-Compose transforms, depth first (the order in which they apply).

        Examples:
            >>> from tdrl.envs.transforms import InitTracker, StepCounter
            >>> [type(t).__name__ for t in Compose(StepCounter(), Compose(InitTracker())).leaves()]
            ['StepCounter', 'InitTracker']
        """
        out: list[Transform] = []
        for t in self._items():
            out.extend(t.leaves() if isinstance(t, Compose) else [t])
        return out

    def clone(self) -> Compose:
        """A detached Compose of the transforms' clones (see :meth:`Transform.clone`).

        Examples:
            >>> from tdrl.envs.transforms import StepCounter
            >>> t = Compose(StepCounter())
            >>> c = t.clone()
            >>> len(c), c[0] is t[0]
            (1, False)
        """
        return Compose(*(t.clone() for t in self._items()))

    def _changed(self) -> None:
        owner = self.container
        if owner is not None:
            owner._rebuild()

    # ------------------------------------------------------------------ chained hooks
    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._items():
            tensordict = t._call(tensordict)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._items():
            tensordict = t(tensordict)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for t in self._items():
            next_tensordict = t._step(tensordict, next_tensordict)
        return next_tensordict

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for t in self._items():
            tensordict_out = t._reset(tensordict_in, tensordict_out)
        return tensordict_out

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in reversed(self._items()):
            tensordict = t._inv_call(tensordict)
        return tensordict

    def _chain(self, kind: str, spec: Composite) -> Composite:
        for t in self._items():
            spec = getattr(t, f"transform_{kind}_spec")(spec)
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._chain("observation", observation_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._chain("reward", reward_spec)

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        return self._chain("done", done_spec)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        return self._chain("action", action_spec)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._chain("state", state_spec)

    def extra_repr(self) -> str:
        return ""


def _nodes(t: Transform) -> list[Transform]:
    """``t`` and, for a Compose, every transform nested in it."""
    out = [t]
    if isinstance(t, Compose):
        for child in t._items():
            out.extend(_nodes(child))
    return out
