"""A policy whose actions name the weights that produced them (weight-sync tests)."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModule

__all__ = ["set_policy_version", "version_policy"]


class _Version(torch.nn.Module):
    """Acts with its single weight: every action equals the weight's value."""

    def __init__(self) -> None:
        super().__init__()
        self.version = torch.nn.Parameter(torch.zeros(1))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.version.expand(*obs.shape[:-1], 1).clone()


def version_policy() -> TensorDictModule:
    """A policy reading ``"observation"`` and writing ``"action"`` equal to its one weight
    (0 at first): a collected batch says which weights ran.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> policy = version_policy()
        >>> set_policy_version(policy, 3.0)
        >>> policy(TensorDict({"observation": torch.zeros(2, 1)}, [2]))["action"].flatten().tolist()
        [3.0, 3.0]
    """
    return TensorDictModule(_Version(), in_keys=["observation"], out_keys=["action"])


def set_policy_version(policy: TensorDictModule, value: float) -> None:
    """Sets the weight of a :func:`version_policy` (in place, as an optimizer step would)."""
    with torch.no_grad():
        policy.module.version.fill_(value)
