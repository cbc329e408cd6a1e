"""Agent groups of multi-agent envs: TorchRL's ``MarlGroupMapType`` and ``check_marl_grouping``.

A multi-agent wrapper stores the entries of its agents by group: the agents of group ``g``
share the node ``g`` of the data (``("g", "observation")`` has one row per agent of ``g``).
A *group map* says which agent goes where: ``{"group name": ["agent name", ...]}``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence

__all__ = ["MarlGroupMapType", "check_marl_grouping", "group_by_name"]

_NUMBERED = re.compile(r"^(?P<prefix>.+)_(?P<index>\d+)$")


class MarlGroupMapType(enum.Enum):
    """Ready-made ways of grouping agents (TorchRL's enum).

    - ``ALL_IN_ONE_GROUP``: every agent in one group named ``"agents"``.
    - ``ONE_GROUP_PER_AGENT``: each agent in a group of its own, named after the agent.

    Examples:
        >>> MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["a_0", "b_0"])
        {'agents': ['a_0', 'b_0']}
        >>> MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(["a_0", "b_0"])
        {'a_0': ['a_0'], 'b_0': ['b_0']}
    """

    ALL_IN_ONE_GROUP = 1
    ONE_GROUP_PER_AGENT = 2

    def get_group_map(self, agent_names: Sequence[str]) -> dict[str, list[str]]:
        """The group map of ``agent_names`` (kept in their order)."""
        names = [str(n) for n in agent_names]
        if self is MarlGroupMapType.ALL_IN_ONE_GROUP:
            return {"agents": names}
        return {name: [name] for name in names}


def group_by_name(agent_names: Sequence[str]) -> dict[str, list[str]]:
    """Groups agents named ``<prefix>_<number>`` by prefix; any other name is a group of its own.

    This is the default grouping of the multi-agent wrappers: one group per agent type
    (``adversary_0, agent_0, agent_1`` -> ``adversary: [adversary_0]``, ``agent: [agent_0,
    agent_1]``). Groups appear in the order of their first agent.

    Examples:
        >>> group_by_name(["adversary_0", "agent_0", "agent_1"])
        {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
        >>> group_by_name(["player_1", "player_2", "referee"])
        {'player': ['player_1', 'player_2'], 'referee': ['referee']}
    """
    groups: dict[str, list[str]] = {}
    for name in agent_names:
        match = _NUMBERED.match(str(name))
        group = match.group("prefix") if match else str(name)
        groups.setdefault(group, []).append(str(name))
    return groups


def check_marl_grouping(group_map: Mapping[str, Sequence[str]], agent_names: Sequence[str]) -> None:
    """Checks that ``group_map`` puts every agent of ``agent_names`` in exactly one group.

    Raises:
        TypeError: ``group_map`` is not a mapping of group names to lists of agent names.
        ValueError: a group is empty or named like a reserved key, an agent is missing, in
            two groups, or unknown.

    Examples:
        >>> check_marl_grouping({"agents": ["a", "b"]}, ["a", "b"])
        >>> check_marl_grouping({"agents": ["a"]}, ["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: check_marl_grouping: agents ['b'] are in no group (got groups {'agents': ['a']}; expected every agent of ['a', 'b'] in exactly one group). Add them to a group.
    """
    owner = "check_marl_grouping"
    if not isinstance(group_map, Mapping) or not all(
        isinstance(g, str) and not isinstance(m, str) and isinstance(m, Sequence)
        for g, m in group_map.items()
    ):
        raise TypeError(
            f"{owner}: group_map must map group names to lists of agent names (got "
            f"{group_map!r}). Pass e.g. {{'agents': ['agent_0', 'agent_1']}}."
        )
    groups = {g: [str(a) for a in members] for g, members in group_map.items()}
    reserved = sorted(set(groups) & {"next", "_reset", "done", "terminated", "truncated"})
    empty = sorted(g for g, members in groups.items() if not members)
    if reserved or empty:
        raise ValueError(
            f"{owner}: groups must be non-empty and not named like a reserved key (got empty "
            f"groups {empty}, reserved names {reserved}). Rename or drop those groups."
        )
    names = [str(a) for a in agent_names]
    seen: dict[str, str] = {}
    for group, members in groups.items():
        for agent in members:
            if agent in seen:
                raise ValueError(
                    f"{owner}: agent {agent!r} is in two groups (got {seen[agent]!r} and "
                    f"{group!r}; expected exactly one). Keep it in one group."
                )
            seen[agent] = group
    unknown = sorted(set(seen) - set(names))
    if unknown:
        raise ValueError(
            f"{owner}: agents {unknown} are not agents of the env (got groups {groups}; "
            f"expected names among {names}). Fix the names."
        )
    missing = [a for a in names if a not in seen]
    if missing:
        raise ValueError(
            f"{owner}: agents {missing} are in no group (got groups {groups}; expected every "
            f"agent of {names} in exactly one group). Add them to a group."
        )
