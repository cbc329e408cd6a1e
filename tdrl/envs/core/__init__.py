"""The env core: EnvBase, step_mdp, check_env_specs and key helpers."""

from tdrl.envs.core._base import EnvBase
from tdrl.envs.core._check import check_env_specs
from tdrl.envs.core._creator import EnvCreator, EnvMeta
from tdrl.envs.core._exploration_type import (
    ExplorationType,
    exploration_type,
    set_exploration_type,
)
from tdrl.envs.core._keys import DoneGroup
from tdrl.envs.core._marl import MarlGroupMapType, check_marl_grouping, group_by_name
from tdrl.envs.core._random_policy import RandomPolicy
from tdrl.envs.core._step_mdp import StepMDP, step_mdp
from tdrl.specs import make_composite_from_td

__all__ = [
    "DoneGroup",
    "EnvBase",
    "EnvCreator",
    "EnvMeta",
    "ExplorationType",
    "MarlGroupMapType",
    "RandomPolicy",
    "StepMDP",
    "check_env_specs",
    "check_marl_grouping",
    "exploration_type",
    "group_by_name",
    "make_composite_from_td",
    "set_exploration_type",
    "step_mdp",
]
