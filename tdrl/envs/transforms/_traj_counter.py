"""TrajCounter: a trajectory id per done group, unique across clones and worker processes."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import get_spawning_popen
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import key_list
from tdrl.specs import Bounded, Composite

__all__ = ["TrajCounter"]

_INT64_MAX = torch.iinfo(torch.int64).max


class _SharedCount:
    """An int64 counter in shared memory, guarded by a process-safe lock.

    The value lives in a ``multiprocessing`` ``Value`` of the ``spawn`` context: forked children
    inherit it, and spawned (or forkserver) children receive it when it is pickled while a
    process is being started (``ParallelEnv`` workers, ``multiprocessing.Process`` arguments),
    even inside a cloudpickled factory. ``copy.deepcopy`` shares it. Any other pickling (to a
    file, to a running process) cannot carry shared memory: the copy gets its own counter that
    starts at the current value.
    """

    def __init__(self, value: int = 0) -> None:
        self._value = multiprocessing.get_context("spawn").Value("q", int(value))

    def take(self, n: int) -> int:
        """Adds ``n`` to the counter and returns the value before the addition."""
        with self._value.get_lock():
            start = int(self._value.value)
            self._value.value = start + n
        return start

    def get(self) -> int:
        with self._value.get_lock():
            return int(self._value.value)

    def set(self, value: int) -> None:
        with self._value.get_lock():
            self._value.value = int(value)

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedCount:
        return self

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if get_spawning_popen() is not None:  # a child process is being started: share
            # ForkingPickler carries the shared memory and the lock (as handles for the new
            # process), also when the outer pickler is another one (cloudpickle)
            return _rebuild_shared, (bytes(ForkingPickler.dumps(self._value)),)
        return _SharedCount, (self.get(),)


def _rebuild_shared(blob: bytes) -> _SharedCount:
    out = _SharedCount.__new__(_SharedCount)
    out._value = ForkingPickler.loads(blob)
    return out


class TrajCounter(Transform):
    """Gives every trajectory a unique id: a global counter incremented at each reset.

    After a reset, each entry of the done group that resets (every entry on a full reset, the
    entries whose ``_reset`` is true on a partial one) gets the next unused id, in row-major
    order; the others keep theirs. Steps copy the id to ``("next", out_key)``, so a rollout
    holds the id of each step's trajectory. The done group counted is the one whose prefix is
    the prefix of ``out_key`` (the root group for a plain string); the entry has that group's
    done shape (``[*B, 1]``, or per agent for ``("agents", "traj_count")``). As in TorchRL it
    is an observation (``observation_spec``) only, not a state entry.

    The counter is shared by :meth:`clone` (and ``copy.deepcopy``) and by the worker processes
    of a :class:`~tdrl.envs.ParallelEnv` whose factory clones one transform built outside it,
    so no two trajectories of these envs ever get the same id. A transform built *inside* each
    worker's factory has a counter per worker. Pickled outside the start of a process (to a
    file), a copy continues from the current value with its own counter.

    ``state_dict()`` holds ``"traj_count"``, the next id (a 0-dim int64 tensor);
    ``load_state_dict`` also accepts a plain int, as TorchRL writes it.

    Args:
        out_key: the entry holding the trajectory id.
        repeats: TorchRL 0.14.1 stores this argument without using it; only ``None`` (or 0)
            is accepted.

    Raises:
        NotImplementedError: ``repeats`` is another value.
        KeyError: no done group of the env has the prefix of ``out_key``.

    Examples:
        >>> from tdrl.envs.transforms import Compose, StepCounter, TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=100), Compose(StepCounter(2), TrajCounter()))
        >>> td = env.rollout(6, break_when_any_done=False)
        >>> td["next", "traj_count"].flatten().tolist()
        [0, 0, 1, 1, 2, 2]
    """

    def __init__(self, out_key: NestedKey = "traj_count", *, repeats: int | None = None) -> None:
        if repeats not in (None, 0):
            raise NotImplementedError(
                f"TrajCounter.__init__: repeats is not supported (got repeats={repeats!r}; "
                "expected None). TorchRL 0.14.1 stores repeats without using it; drop the "
                "argument."
            )
        keys = key_list(out_key)
        if len(keys) != 1:
            raise ValueError(
                f"TrajCounter.__init__: out_key must be one key (got {out_key!r}; expected a "
                "string or a tuple of strings). Pass a single key."
            )
        super().__init__()
        self.out_keys = keys
        self.repeats = 0
        self._count = _SharedCount()
        self._shape: torch.Size | None = None

    @property
    def out_key(self) -> NestedKey:
        """The entry holding the trajectory id."""
        return self.out_keys[0]

    def _bind(self, parent: EnvBase) -> None:
        key = self.out_key
        prefix = key[:-1] if isinstance(key, tuple) else ()
        for group in parent.done_groups:
            if tuple(group.prefix) == tuple(prefix):
                self._shape = parent.full_done_spec[group.done].shape
                return
        groups = [g.prefix for g in parent.done_groups]
        raise KeyError(
            f"TrajCounter: no done group has the prefix of out_key {key!r} (got done groups "
            f"with prefixes {groups}; expected prefix {prefix}). Place the key next to a "
            "done leaf, e.g. ('agents', 'traj_count') for an ('agents', 'done') group."
        )

    def _spec(self, device: torch.device | None) -> Bounded:
        if self._shape is None:
            raise self._env_only("transform_observation_spec")
        return Bounded(0, _INT64_MAX, shape=self._shape, dtype=torch.int64, device=device)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec[self.out_key] = self._spec(observation_spec.device)
        return observation_spec

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        shape = self._shape
        if shape is None:
            raise self._env_only("_reset")
        device = tensordict_out.device
        key = self.out_key
        like = torch.zeros(shape, dtype=torch.int64, device=device)
        mask = self._reset_mask(tensordict_in, key, like)
        reset = (
            torch.ones(shape, dtype=torch.bool, device=device)
            if mask is None
            else mask.expand(shape)
        )
        n = int(reset.sum())
        ids = like
        if n:
            start = self._count.take(n)
            new = torch.arange(start, start + n, dtype=torch.int64, device=device)
            ids = like.masked_scatter(reset, new)
        tensordict_out.set(key, self._where_reset(tensordict_in, key, ids))
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        value = tensordict.get(self.out_key, None)
        if value is None:
            raise self._missing_key(self.out_key, tensordict, "_step")
        next_tensordict.set(self.out_key, value)
        return next_tensordict

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("_call")

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "traj_count"] = torch.tensor(self._count.get(), dtype=torch.int64)

    def _load_from_state_dict(
        self,
        state_dict: Any,
        prefix: str,
        local_metadata: Any,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        key = prefix + "traj_count"
        if key not in state_dict:
            missing_keys.append(key)
            return
        value = state_dict[key]
        if isinstance(value, torch.Tensor):
            value = value.item() if value.numel() == 1 else value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            error_msgs.append(
                f"TrajCounter.load_state_dict: {key!r} must be a non-negative integer (got "
                f"{value!r}; expected the next trajectory id). Pass a state_dict saved by a "
                "TrajCounter."
            )
            return
        self._count.set(value)

    def extra_repr(self) -> str:
        return f"out_key={self.out_key!r}"
