"""VMAS agents as tdrl groups: the default group map, per-group specs and the step key plan.

A VMAS env speaks in per-agent lists (one ``[num_envs, ...]`` tensor per agent); tdrl stores
the agents of a group side by side (``(group, "observation")`` of shape ``[num_envs, n, ...]``).
A :class:`GroupPlan` is built once per group from the spaces and a first sample; on the hot path
it only splits the group's action into per-agent views and stacks per-agent outputs, without
looking at spaces or specs again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core import MarlGroupMapType, check_marl_grouping, group_by_name
from tdrl.specs import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)

__all__ = ["ActionCodec", "GroupPlan", "import_vmas", "resolve_group_map", "vmas_group_map"]

Path = tuple[str, ...]


def import_vmas(owner: str) -> Any:
    """Imports vmas, with an actionable error when it is missing."""
    try:
        import vmas
    except ImportError as err:  # pragma: no cover - vmas is a test dependency
        raise ImportError(
            f"{owner}: vmas is not installed (got ImportError: {err}; expected vmas>=1.4). "
            "Install it with `pip install tdrl[vmas]`."
        ) from err
    return vmas


def vmas_group_map(agent_names: Sequence[str]) -> dict[str, list[str]]:
    """The default group map of a VMAS env (TorchRL's rule).

    When every agent is named ``<prefix>_<number>``, agents are grouped by prefix (see
    :func:`~tdrl.envs.group_by_name`), except that a single ``"agent"`` group is called
    ``"agents"``. Otherwise every agent goes into one group ``"agents"``.

    Examples:
        >>> vmas_group_map(["agent_0", "agent_1"])
        {'agents': ['agent_0', 'agent_1']}
        >>> vmas_group_map(["adversary_0", "agent_0", "agent_1"])
        {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
        >>> vmas_group_map(["alice", "bob_0"])
        {'agents': ['alice', 'bob_0']}
    """
    names = [str(n) for n in agent_names]
    groups = group_by_name(names)
    # group_by_name puts an unnumbered name in a group named after itself.
    all_numbered = not any(group in members for group, members in groups.items())
    if not all_numbered or list(groups) == ["agent"]:
        return {"agents": names}
    return groups


def resolve_group_map(
    group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None, agent_names: Sequence[str]
) -> dict[str, list[str]]:
    """The group map to use: VMAS's default for ``None``, an enum's map, or a checked dict."""
    if group_map is None:
        return vmas_group_map(agent_names)
    if isinstance(group_map, MarlGroupMapType):
        return group_map.get_group_map(agent_names)
    check_marl_grouping(group_map, agent_names)
    return {str(g): [str(a) for a in members] for g, members in group_map.items()}


def leaves(value: Any, path: Path = ()) -> list[tuple[Path, torch.Tensor]]:
    """The ``(path, tensor)`` leaves of a tensor or a (nested) dict of tensors."""
    if isinstance(value, Mapping):
        out: list[tuple[Path, torch.Tensor]] = []
        for key, sub in value.items():
            out.extend(leaves(sub, (*path, str(key))))
        return out
    return [(path, torch.as_tensor(value))]


def _at(value: Any, path: Path) -> torch.Tensor:
    for key in path:
        value = value[key]
    return value  # type: ignore[no-any-return]


def nest(items: Sequence[tuple[Path, Any]], batch: torch.Size, device: Any) -> TensorDictBase:
    """A TensorDict of batch ``batch`` holding ``items`` at their (nested) paths."""
    data: dict[str, Any] = {}
    children: dict[str, list[tuple[Path, Any]]] = {}
    for path, value in items:
        if len(path) == 1:
            data[path[0]] = value
        else:
            children.setdefault(path[0], []).append((path[1:], value))
    for key, sub in children.items():
        data[key] = nest(sub, batch, device)
    return TensorDict._new_unsafe(data, batch_size=batch, device=device)


class ActionCodec:
    """One group's action: its spec, and the split of a group action into VMAS's per-agent
    actions (``[num_envs, d]`` floats, ``[num_envs, 1]`` indices or ``[num_envs, k]`` indices).
    """

    def __init__(
        self, spaces: Sequence[Any], shape: tuple[int, int], device: Any, cat: bool
    ) -> None:
        kinds = {_space_kind(s) for s in spaces}
        kind = kinds.pop()
        self.kind = kind
        self.categorical = cat
        b, n = shape
        self.spec: TensorSpec
        if kind == "Box":
            low = torch.stack([torch.as_tensor(s.low, dtype=torch.float32) for s in spaces])
            high = torch.stack([torch.as_tensor(s.high, dtype=torch.float32) for s in spaces])
            full = (b, n, *low.shape[1:])
            if bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
                low, high = low.expand(full).to(device), high.expand(full).to(device)
                self.spec = Bounded(low, high, shape=full, device=device, dtype=torch.float32)
            else:
                self.spec = Unbounded(shape=full, device=device, dtype=torch.float32)
        elif kind == "Discrete":
            k = int(spaces[0].n)
            self.spec = (
                Categorical(k, shape=(b, n), device=device)
                if cat
                else OneHot(k, shape=(b, n, k), device=device, dtype=torch.int64)
            )
        else:
            self.nvec = [int(v) for v in spaces[0].nvec]
            self.spec = (
                MultiCategorical(self.nvec, shape=(b, n, len(self.nvec)), device=device)
                if cat
                else MultiOneHot(
                    self.nvec, shape=(b, n, sum(self.nvec)), device=device, dtype=torch.int64
                )
            )

    def split(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per-agent views of a group action, in the group's agent order."""
        if self.kind == "Box":
            return action.unbind(1)
        if self.kind == "Discrete":
            index = action.unsqueeze(-1) if self.categorical else action.argmax(-1, keepdim=True)
            return index.unbind(1)
        if not self.categorical:
            parts = action.split(self.nvec, dim=-1)
            action = torch.stack([p.argmax(-1) for p in parts], dim=-1)
        return action.unbind(1)


def _space_kind(space: Any) -> str:
    kind = type(space).__name__
    if kind not in ("Box", "Discrete", "MultiDiscrete"):
        raise TypeError(
            f"VmasWrapper.__init__: a VMAS action space is not supported (got {kind}; expected "
            "Box, Discrete or MultiDiscrete). Build the VMAS env with continuous or discrete "
            "actions."
        )
    return kind


def _signature(space: Any) -> tuple[Any, ...]:
    kind = _space_kind(space)
    if kind == "Box":
        return (kind, tuple(space.shape))
    if kind == "Discrete":
        return (kind, int(space.n))
    return (kind, tuple(int(v) for v in space.nvec))


class GroupPlan:
    """Everything the wrapper needs about one group, computed once.

    Args:
        name: the group name (the entry of the data that holds its agents).
        agents: the agent names, in the group's order.
        index: the VMAS positions of these agents.
        action_spaces: each agent's action space (gym spaces from VMAS).
        obs: each agent's first observation (tensor or dict of tensors) for shapes and dtypes.
        info: each agent's first info dict (every value becomes float32, as in TorchRL).
        num_envs, device, categorical: the env's batch, device and discrete encoding.
    """

    def __init__(
        self,
        name: str,
        agents: Sequence[str],
        index: Sequence[int],
        action_spaces: Sequence[Any],
        obs: Sequence[Any],
        info: Sequence[Mapping[str, Any]],
        num_envs: int,
        device: Any,
        categorical: bool,
    ) -> None:
        self.name = name
        self.agents = list(agents)
        self.index = list(index)
        self.batch = torch.Size((num_envs, len(self.agents)))
        self.device = device
        self.action_key = (name, "action")
        self.reward_key = (name, "reward")
        self._same(
            "action space", [_signature(s) for s in action_spaces], "actions of one kind and size"
        )
        self.action = ActionCodec(action_spaces, (num_envs, len(agents)), device, categorical)
        obs_leaves = [[(p, t.shape[1:], t.dtype) for p, t in leaves(o)] for o in obs]
        self._same("observation", obs_leaves, "the same observation entries, shapes and dtypes")
        info_leaves = [[(p, t.shape[1:]) for p, t in leaves(i)] for i in info]
        self._same("info", info_leaves, "the same info entries and shapes")
        self.obs_paths = [p for p, _, _ in obs_leaves[0]]
        self.obs_shapes = [(s, d) for _, s, d in obs_leaves[0]]
        # A per-agent scalar info ([num_envs]) gets a trailing dim, as the reward does.
        self.info_paths = [(p, len(s) == 0) for p, s in info_leaves[0]]
        self.info_shapes = [s for _, s in info_leaves[0]]

    def _same(self, what: str, values: list[Any], rule: str) -> None:
        if any(v != values[0] for v in values[1:]):
            got = dict(zip(self.agents, values))
            raise ValueError(
                f"VmasWrapper.__init__: the agents of group {self.name!r} differ in their {what} "
                f"(got {got}; expected {rule} per group). Pass a group_map whose groups hold "
                "agents of one kind, e.g. MarlGroupMapType.ONE_GROUP_PER_AGENT."
            )

    def specs(self) -> tuple[Composite, Composite, Composite]:
        """``(observation, action, reward)`` composites of this group (shape ``[num_envs, n]``)."""
        b, dev = tuple(self.batch), self.device
        obs_items = [
            (("observation", *p), Unbounded(shape=(*b, *s), device=dev, dtype=d))
            for p, (s, d) in zip(self.obs_paths, self.obs_shapes)
        ]
        obs_items += [
            (("info", *p), Unbounded(shape=(*b, *(shape or (1,))), device=dev))
            for (p, _), shape in zip(self.info_paths, self.info_shapes)
        ]
        obs = Composite(shape=b, device=dev)
        for key, spec in obs_items:
            obs[key] = spec
        action = Composite(action=self.action.spec, shape=b, device=dev)
        reward = Composite(reward=Unbounded(shape=(*b, 1), device=dev), shape=b, device=dev)
        return obs, action, reward

    def split_action(self, tensordict: TensorDictBase, out: list[Any]) -> None:
        """Writes this group's per-agent actions into ``out`` at the agents' VMAS positions."""
        for i, part in zip(self.index, self.action.split(tensordict.get(self.action_key))):
            out[i] = part

    def read(self, obs: Sequence[Any], infos: Sequence[Any], rews: Sequence[Any] | None) -> Any:
        """The group's TensorDict from per-agent lists (``rews=None`` at reset)."""
        idx = self.index
        items: list[tuple[Path, Any]] = []
        for path in self.obs_paths:
            parts = [_at(obs[i], path) for i in idx] if path else [obs[i] for i in idx]
            items.append((("observation", *path), torch.stack(parts, dim=1)))
        for path, scalar in self.info_paths:
            value = torch.stack([_at(infos[i], path) for i in idx], dim=1)
            value = value.to(torch.float32)
            items.append((("info", *path), value.unsqueeze(-1) if scalar else value))
        if rews is not None:
            items.append((("reward",), torch.stack([rews[i] for i in idx], dim=1).unsqueeze(-1)))
        return nest(items, self.batch, self.device)
