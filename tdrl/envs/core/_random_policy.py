"""RandomPolicy: a policy that writes a random action drawn from an action spec."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.specs import Composite, TensorSpec

__all__ = ["RandomPolicy"]


class RandomPolicy:
    """Writes a random action drawn from ``action_spec`` into the TensorDict it is called on.

    A :class:`~tdrl.specs.Composite` spec (e.g. ``env.full_action_spec``) writes every action
    leaf at its key; a leaf spec is written at ``action_key``. Masks held by discrete specs are
    honoured. Without a spec, :meth:`set_action_spec_from_env` fills it in (collectors call it).

    Args:
        action_spec: the spec to sample from (cloned), or ``None`` to set it later.
        action_key: where a leaf spec's sample is written.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> env = CountingEnv(batch_size=(3,))
        >>> policy = RandomPolicy(env.action_spec)
        >>> td = policy(env.reset())
        >>> td["action"].shape, bool(env.action_spec.is_in(td["action"]))
        (torch.Size([3, 1]), True)
        >>> env.rollout(4, RandomPolicy(env.full_action_spec)).batch_size
        torch.Size([3, 4])
    """

    def __init__(self, action_spec: TensorSpec | None = None, action_key: NestedKey = "action"):
        self.action_spec = action_spec.clone() if action_spec is not None else None
        self.action_key = action_key

    def set_action_spec_from_env(self, env: Any) -> None:
        """Takes ``env.full_action_spec`` (a clone) when no spec was given; no-op otherwise."""
        if self.action_spec is None:
            self.action_spec = env.full_action_spec.clone()

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        spec = self.action_spec
        if spec is None:
            raise RuntimeError(
                "RandomPolicy.__call__: no action spec (got action_spec=None; expected a spec). "
                "Pass RandomPolicy(env.action_spec), or call "
                "policy.set_action_spec_from_env(env) first."
            )
        if isinstance(spec, Composite):
            return td.update(spec.rand())
        return td.set(self.action_key, spec.rand())
