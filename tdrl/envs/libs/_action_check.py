"""ActionCheck: refuses actions outside an agent's action space before they reach the simulator.

Multi-agent simulators treat such actions badly: an ``assert`` without the agent's name, an
index that wraps around, a silent clip. The check runs on a group's encoded actions at once
(one comparison per group and step, a few microseconds) and names the agent, the key and the
value when it fails.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

import numpy as np
import torch

from tdrl.specs import Bounded, Categorical, MultiCategorical, OneHot, TensorSpec

__all__ = ["ActionCheck", "first_outside"]


class ActionCheck:
    """Bounds of one agent's gymnasium action space, checked on a group's encoded actions.

    Args:
        space: the action space of one agent of the group.
        owner: the class name used in messages (``"PettingZooWrapper"``).
        key: the group's action key, for messages.

    Examples:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> check = ActionCheck(spaces.Discrete(3), "Env", ("agents", "action"))
        >>> check(np.array([0, 2]), ["a", "b"], {"a", "b"})
        >>> check(np.array([0, 5]), ["a", "b"], {"a", "b"})
        Traceback (most recent call last):
        ...
        ValueError: Env.step: the action of agent 'b' is outside its action space (got 5 at ...
    """

    def __init__(self, space: Any, owner: str, key: Any) -> None:
        from gymnasium import spaces

        self.space, self.owner, self.key = space, owner, key
        self.offset: Any = 0  # what tdrl's index is shifted by (a Discrete's ``start``)
        self.low: Any = None
        if isinstance(space, spaces.Discrete):
            self.offset = int(space.start)
            self.low, self.high = self.offset, self.offset + int(space.n) - 1
            self.rule = f"an index in [0, {int(space.n) - 1}]"
        elif isinstance(space, spaces.MultiDiscrete):
            self.offset = np.asarray(space.start)
            self.low, self.high = self.offset, self.offset + np.asarray(space.nvec) - 1
            self.rule = f"indices below {np.asarray(space.nvec).tolist()}"
        elif isinstance(space, spaces.MultiBinary):
            self.low, self.high = 0, 1
            self.rule = "0 or 1 values"
        elif isinstance(space, spaces.Box):
            self.low, self.high = space.low, space.high
            self.rule = f"values in [{_short(space.low)}, {_short(space.high)}]"
        else:
            self.rule = f"a value of {space}"

    def __call__(self, encoded: Any, agents: Sequence[str], acting: Container[str]) -> None:
        """Raises ``ValueError`` when an acting agent's row of ``encoded`` is outside the space
        (rows of agents that do not act are not passed to the env, hence not checked)."""
        if self.low is not None:
            ok = (encoded >= self.low) & (encoded <= self.high)  # NaN fails both
            if ok.all():
                return
            rows = ok.reshape(len(agents), -1).all(1).tolist()
            for agent, good, value in zip(agents, rows, encoded):
                if not good and agent in acting:
                    self._fail(agent, np.asarray(value) - self.offset)
            return
        for i, agent in enumerate(agents):  # Dict/Tuple spaces: gymnasium's own test
            if agent in acting:
                value = _row(encoded, i)
                if not self.space.contains(value):
                    self._fail(agent, value)

    def _fail(self, agent: str, value: Any) -> None:
        shown = np.asarray(value).tolist() if isinstance(value, (np.ndarray, np.generic)) else value
        raise ValueError(
            f"{self.owner}.step: the action of agent {agent!r} is outside its action space (got "
            f"{shown!r} at key {self.key!r}; expected {self.rule}). Send actions within "
            f"env.full_action_spec[{self.key!r}] (bound a policy's output to the spec)."
        )


def _short(bound: np.ndarray) -> Any:
    """A bound for messages: one number when the array holds one value."""
    flat = np.unique(bound)
    return flat[0].item() if flat.size == 1 else bound.tolist()


def _row(value: Any, index: int) -> Any:
    if isinstance(value, dict):
        return {k: _row(v, index) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_row(v, index) for v in value)
    return value[index]


def first_outside(spec: TensorSpec, value: torch.Tensor) -> tuple[tuple[int, ...], Any, str] | None:
    """The first entry of ``value`` outside ``spec`` (a Bounded, Categorical, MultiCategorical
    or OneHot action spec): ``(index over the spec's batch dims, its value, the rule)``; None
    when every entry is inside (or the spec is of another kind). For error paths only.

    Examples:
        >>> import torch
        >>> from tdrl.specs import Categorical
        >>> first_outside(Categorical(3, shape=(2, 2)), torch.tensor([[0, 1], [2, 7]]))
        ((1, 1), 7, 'an index in [0, 2]')
    """
    value = value.detach().cpu()
    if isinstance(spec, Bounded):
        low, high = spec.space.low.cpu(), spec.space.high.cpu()
        bad = ~((value >= low) & (value <= high))
        rule = f"values in [{_short(low.numpy())}, {_short(high.numpy())}]"
        event = 1
    elif isinstance(spec, MultiCategorical):
        nvec = torch.as_tensor(spec.nvec)
        bad, rule, event = (value < 0) | (value >= nvec), f"indices below {nvec.tolist()}", 1
    elif isinstance(spec, Categorical):
        bad, rule, event = (value < 0) | (value >= spec.n), f"an index in [0, {spec.n - 1}]", 0
    elif isinstance(spec, OneHot):
        ones = (value == 1).sum(-1, keepdim=True)
        bad = ((value != 0) & (value != 1)) | (ones != 1)
        rule, event = f"a one-hot vector of size {spec.n}", 1
    else:
        return None
    if event:
        bad = bad.reshape(*bad.shape[: bad.ndim - event], -1).any(-1)
    where = bad.nonzero()
    if where.numel() == 0:
        return None
    index = tuple(where[0].tolist())
    return index, value[index].tolist(), rule
