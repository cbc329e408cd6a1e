"""Agent group maps: MarlGroupMapType, group_by_name and check_marl_grouping."""

from __future__ import annotations

import pytest

from tdrl.envs import MarlGroupMapType, check_marl_grouping, group_by_name
from tdrl.envs.utils import MarlGroupMapType as UtilsGroupMapType

NAMES = ["adversary_0", "agent_0", "agent_1", "referee"]


def test_torchrl_import_path_gives_the_same_enum():
    assert UtilsGroupMapType is MarlGroupMapType


def test_all_in_one_group_keeps_the_order():
    assert MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(NAMES) == {"agents": NAMES}


def test_one_group_per_agent():
    groups = MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(NAMES)
    assert list(groups) == NAMES
    assert all(groups[name] == [name] for name in NAMES)


def test_group_by_name_groups_numbered_names_by_prefix():
    groups = group_by_name(NAMES)
    assert groups == {
        "adversary": ["adversary_0"],
        "agent": ["agent_0", "agent_1"],
        "referee": ["referee"],
    }
    check_marl_grouping(groups, NAMES)


def test_group_by_name_keeps_underscores_inside_the_prefix():
    assert group_by_name(["agent_blue_0", "agent_blue_1"]) == {
        "agent_blue": ["agent_blue_0", "agent_blue_1"]
    }


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"a": ["agent_0"], "b": ["agent_0", "agent_1"]}, "in two groups"),
        ({"a": ["agent_0"]}, r"\['agent_1'\] are in no group"),
        ({"a": ["agent_0", "agent_1", "ghost"]}, r"\['ghost'\] are not agents"),
        ({"a": [], "b": ["agent_0", "agent_1"]}, "non-empty"),
        ({"next": ["agent_0", "agent_1"]}, "reserved"),
    ],
)
def test_bad_group_maps_are_refused(groups, message):
    with pytest.raises(ValueError, match=message):
        check_marl_grouping(groups, ["agent_0", "agent_1"])


def test_a_group_map_that_is_not_a_mapping_of_lists_is_refused():
    with pytest.raises(TypeError, match="group_map must map group names"):
        check_marl_grouping({"agents": "agent_0"}, ["agent_0"])
