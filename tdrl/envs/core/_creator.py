"""EnvCreator: an env factory that travels to worker processes and reads the specs once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import torch

from tdrl.envs.core._base import EnvBase
from tdrl.specs import Composite

__all__ = ["EnvCreator", "EnvMeta"]

_KINDS = ("observation", "action", "reward", "done", "state")


@dataclass(frozen=True)
class EnvMeta:
    """What a batched env needs to know about a sub-env without holding it: batch, device, specs.

    Attributes:
        env_name: class name of the env (for messages).
        batch_size: the env batch size.
        device: the env device (``None``: cpu).
        specs: the five full specs, keyed ``"observation"``, ``"action"``, ``"reward"``,
            ``"done"`` and ``"state"``.
        validate: the env's ``validate`` flag.
        allow_done_after_reset: the env's ``allow_done_after_reset`` flag.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> meta = EnvMeta.from_env(CountingEnv(batch_size=(2,)))
        >>> meta.batch_size, meta.specs["action"]["action"].shape
        (torch.Size([2]), torch.Size([2, 1]))
    """

    env_name: str
    batch_size: torch.Size
    device: torch.device | None
    specs: Mapping[str, Composite]
    validate: bool = False
    allow_done_after_reset: bool = False

    @classmethod
    def from_env(cls, env: EnvBase) -> EnvMeta:
        """Reads the metadata of a live env (the specs are cloned)."""
        specs = {
            "observation": env.full_observation_spec.clone(),
            "action": env.full_action_spec.clone(),
            "reward": env.full_reward_spec.clone(),
            "done": env.full_done_spec.clone(),
            "state": env.full_state_spec.clone(),
        }
        return cls(
            env_name=type(env).__name__,
            batch_size=torch.Size(env.batch_size),
            device=env.device,
            specs=specs,
            validate=bool(env.validate),
            allow_done_after_reset=bool(env.allow_done_after_reset),
        )

    def difference(self, other: EnvMeta) -> str | None:
        """A short description of the first difference with ``other`` (None when they match).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> a = EnvMeta.from_env(CountingEnv(batch_size=(2,)))
            >>> b = EnvMeta.from_env(CountingEnv(batch_size=(3,)))
            >>> a.difference(a) is None, a.difference(b)
            (True, 'batch_size (2,) != (3,)')
        """
        if self.batch_size != other.batch_size:
            return f"batch_size {tuple(self.batch_size)} != {tuple(other.batch_size)}"
        if self.device != other.device:
            return f"device {self.device} != {other.device}"
        for kind in _KINDS:
            mine, theirs = self.specs[kind], other.specs[kind]
            if mine == theirs:
                continue
            keys_a, keys_b = set(mine.keys(True, True)), set(theirs.keys(True, True))
            if keys_a != keys_b:
                return (
                    f"full_{kind}_spec keys {sorted(map(str, keys_a))} != "
                    f"{sorted(map(str, keys_b))}"
                )
            for key in sorted(keys_a, key=str):
                if mine[key] != theirs[key]:
                    return f"full_{kind}_spec[{key!r}]: {mine[key]} != {theirs[key]}"
            return f"full_{kind}_spec differs"
        return None


class EnvCreator:
    """A picklable env factory: lambdas and closures travel with cloudpickle.

    Batched envs wrap every factory in an ``EnvCreator`` so that it can be sent to worker processes
    whatever the start method. ``meta`` builds one env in the calling process, reads its specs,
    closes it and caches the result (the cache travels with the creator).

    Args:
        create_env_fn: a callable returning an :class:`EnvBase`.
        create_env_kwargs: keyword arguments given to ``create_env_fn`` at each call.
        share_memory: accepted for TorchRL compatibility. TorchRL moves the state of the env it
            builds to shared memory so that processes share it; tdrl builds independent envs in
            each process (a transform's running statistics are not shared), whatever the value.
        **kwargs: more keyword arguments for ``create_env_fn`` (``create_env_kwargs`` wins on
            a clash, as in TorchRL).

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> creator = EnvCreator(lambda max_steps: CountingEnv(max_steps=max_steps), {"max_steps": 3})
        >>> creator().max_steps, creator(max_steps=7).max_steps
        (3, 7)
        >>> creator.meta.specs["observation"]["observation"].shape
        torch.Size([1])
        >>> import pickle
        >>> pickle.loads(pickle.dumps(creator))().max_steps
        3
    """

    def __init__(
        self,
        create_env_fn: Callable[..., EnvBase],
        create_env_kwargs: Mapping[str, Any] | None = None,
        share_memory: bool = True,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            create_env_kwargs = {**kwargs, **(create_env_kwargs or {})}
        self.share_memory = bool(share_memory)
        if not callable(create_env_fn):
            raise TypeError(
                "EnvCreator.__init__: create_env_fn is not callable "
                f"(got {type(create_env_fn).__name__}; expected a function returning an EnvBase). "
                "Pass the env class or a lambda building it."
            )
        if isinstance(create_env_fn, EnvCreator):
            inner: EnvCreator = create_env_fn
            create_env_kwargs = {**inner.create_env_kwargs, **(create_env_kwargs or {})}
            create_env_fn = inner.create_env_fn
        self.create_env_fn: Callable[..., EnvBase] = create_env_fn
        self.create_env_kwargs: dict[str, Any] = dict(create_env_kwargs or {})
        self._meta: EnvMeta | None = None

    def __call__(self, **kwargs: Any) -> EnvBase:
        """Builds an env; ``kwargs`` override the stored ``create_env_kwargs``."""
        env = self.create_env_fn(**{**self.create_env_kwargs, **kwargs})
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"EnvCreator.__call__: the factory returned a {type(env).__name__} "
                "(expected an EnvBase instance). Return a tdrl env (wrap gymnasium envs in GymEnv)."
            )
        return env

    @property
    def meta(self) -> EnvMeta:
        """The env's metadata, read once from a temporary env built in this process."""
        if self._meta is None:
            env = self()
            try:
                self._meta = EnvMeta.from_env(env)
            finally:
                env.close()
        return self._meta

    def __getstate__(self) -> dict[str, Any]:
        return {
            "payload": cloudpickle.dumps((self.create_env_fn, self.create_env_kwargs)),
            "meta": self._meta,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.create_env_fn, self.create_env_kwargs = cloudpickle.loads(state["payload"])
        self._meta = state["meta"]

    def __repr__(self) -> str:
        name = getattr(self.create_env_fn, "__qualname__", repr(self.create_env_fn))
        return f"EnvCreator({name}, create_env_kwargs={self.create_env_kwargs})"
