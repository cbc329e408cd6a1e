"""The ``nn.Module`` methods TorchRL scripts call on envs (a mixin of EnvBase).

TorchRL's envs are ``nn.Module`` s, so scripts call ``env.apply(fn)`` (e.g. to dump the videos
of a recorder transform), ``env.eval()``/``env.train()``, ``env.state_dict()`` and
``env.load_state_dict(...)``. tdrl's envs are not modules (the module machinery would sit on
every attribute access of the step); they answer these methods with TorchRL's semantics
instead. An env exposes what it contains through the ``_env_children`` hook.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch import nn

__all__ = ["ModuleMethods"]


class ModuleMethods:
    """``apply``, ``children``, ``modules``, ``eval``, ``train``, ``state_dict`` and
    ``load_state_dict`` of an env, as ``nn.Module`` defines them.

    A plain env holds no module and no state: ``state_dict()`` is empty, as in TorchRL.
    Wrappers (``TransformedEnv``) list their env and transforms in ``_env_children``.
    """

    training: bool = True
    """Whether the env is in training mode (``nn.Module.training``); ``eval()`` clears it."""

    def _env_children(self) -> list[Any]:
        """Hook: the envs and modules this env holds, in TorchRL's registration order."""
        return []

    def children(self) -> Iterator[Any]:
        """The envs and modules this env holds directly (``nn.Module.children``).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> list(CountingEnv().children())
            []
        """
        return iter(self._env_children())

    def modules(self) -> Iterator[Any]:
        """This env, then everything it holds, depth first (``nn.Module.modules``).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> [type(m).__name__ for m in CountingEnv().modules()]
            ['CountingEnv']
        """
        yield self
        for child in self._env_children():
            yield from child.modules()

    def apply(self, fn: Callable[[Any], Any]) -> Any:
        """Calls ``fn`` on everything the env holds (children first), then on the env;
        returns the env (``nn.Module.apply``).

        A ``TransformedEnv`` reaches its base env and every transform, so TorchRL's
        ``env.apply(dump_video)`` (``dump_video(m)`` calls ``m.dump()`` on recorder
        transforms) works as written.

        Examples:
            >>> from tdrl.envs.transforms import StepCounter, TransformedEnv
            >>> from tdrl.testing import CountingEnv
            >>> seen = []
            >>> env = TransformedEnv(CountingEnv(), StepCounter())
            >>> env.apply(lambda m: seen.append(type(m).__name__)) is env
            True
            >>> seen
            ['CountingEnv', 'StepCounter', 'TransformedEnv']
        """
        for child in self._env_children():
            child.apply(fn)
        fn(self)
        return self

    def train(self, mode: bool = True) -> Any:
        """Sets the training mode of the env and of what it holds; returns the env.

        Raises:
            ValueError: ``mode`` is not a bool.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = CountingEnv()
            >>> env.train(False) is env, env.training
            (True, False)
        """
        if not isinstance(mode, bool):
            raise ValueError(
                f"{type(self).__name__}.train: mode must be a bool (got {mode!r}; expected True"
                " or False). Call env.train() or env.eval()."
            )
        self.training = mode
        for child in self._env_children():
            child.train(mode)
        return self

    def eval(self) -> Any:
        """``train(False)``; returns the env.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> CountingEnv().eval().training
            False
        """
        return self.train(False)

    def state_dict(self) -> dict[str, Any]:
        """The state of the env (``nn.Module.state_dict``): empty for an env that holds no
        module, as in TorchRL. Wrappers return their transforms' state (and take
        ``nn.Module.state_dict``'s arguments).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> CountingEnv().state_dict()
            OrderedDict()
        """
        return OrderedDict()

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Loads what :meth:`state_dict` returned (``nn.Module.load_state_dict``).

        Returns:
            The missing and unexpected keys (``torch.nn.modules.module._IncompatibleKeys``).

        Raises:
            RuntimeError: ``strict`` and ``state_dict`` holds keys this env does not have.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> CountingEnv().load_state_dict({})
            <All keys matched successfully>
        """
        unexpected = list(state_dict)
        if strict and unexpected:
            raise RuntimeError(
                f"{type(self).__name__}.load_state_dict: unexpected keys (got {unexpected}; "
                "expected none: this env holds no state). Load the state into the env that "
                "saved it, or pass strict=False."
            )
        return nn.modules.module._IncompatibleKeys([], unexpected)
