"""Policy weights for the collector actors, through the Ray object store, with versions."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.distributed._ray import ray

__all__ = ["VersionedWeights"]


class VersionedWeights:
    """The driver's side of the weight sync of :class:`RayCollector`.

    Version 0 is the weights the actors were built with. :meth:`publish` puts new weights in
    the object store once (``ray.put``) under the next version and makes them the target of the
    given actors. Each collect request carries, for its actor, the target's version and object
    reference when the actor does not run that version yet; the actor loads it before the batch
    starts and the batch reports the version it ran (:meth:`loaded`). A restarted actor runs
    version 0 again (:meth:`restarted`), so its next request carries its target again.

    Examples:
        >>> weights = VersionedWeights(2)
        >>> weights.message(0)
        (0, None)
    """

    def __init__(self, num_actors: int) -> None:
        self.version = 0
        self._target: list[tuple[int, Any] | None] = [None] * num_actors
        self._loaded = [0] * num_actors

    def publish(self, weights: TensorDictBase, actors: list[int] | None) -> int:
        """Puts ``weights`` (cpu copies) in the object store as the next version for
        ``actors`` (None: all); returns that version."""
        ref = ray.put(weights.detach().to("cpu"))  # put copies into the store at once
        self.version += 1
        for w in range(len(self._target)) if actors is None else actors:
            self._target[w] = (self.version, ref)
        return self.version

    def message(self, actor: int) -> tuple[int, Any]:
        """``(version, weights reference or None)`` for the next request of ``actor``."""
        target = self._target[actor]
        if target is None or target[0] == self._loaded[actor]:
            return self._loaded[actor], None
        return target

    def loaded(self, actor: int, version: int) -> None:
        """``actor`` delivered a batch collected with ``version``."""
        self._loaded[actor] = version

    def restarted(self, actor: int) -> None:
        """``actor`` was rebuilt: it runs the construction weights (version 0) again."""
        self._loaded[actor] = 0

    def reset(self, actor: int, version: int) -> None:
        """``actor`` loaded a state holding weights ``version``: it keeps them until the next
        :meth:`publish` for it."""
        self._loaded[actor] = version
        self._target[actor] = None

    def versions(self) -> list[int]:
        """The version each actor ran for its last delivered batch."""
        return list(self._loaded)
