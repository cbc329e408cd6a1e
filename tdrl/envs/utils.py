"""TorchRL's ``torchrl.envs.utils`` import path: the env helpers its tutorials import from here.

The objects are tdrl's own (the same as in :mod:`tdrl.envs`), so
``from tdrl.envs.utils import check_env_specs, step_mdp`` works as TorchRL code expects.

Examples:
    >>> from tdrl.envs.utils import ExplorationType, step_mdp
    >>> import tdrl.envs
    >>> step_mdp is tdrl.envs.step_mdp and ExplorationType is tdrl.envs.ExplorationType
    True
"""

from tdrl.envs.core import (
    ExplorationType,
    MarlGroupMapType,
    RandomPolicy,
    check_env_specs,
    check_marl_grouping,
    exploration_type,
    make_composite_from_td,
    set_exploration_type,
    step_mdp,
)

__all__ = [
    "ExplorationType",
    "MarlGroupMapType",
    "RandomPolicy",
    "check_env_specs",
    "check_marl_grouping",
    "exploration_type",
    "make_composite_from_td",
    "set_exploration_type",
    "step_mdp",
]
