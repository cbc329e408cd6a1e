"""Exploration modules: put one after a policy; they only act under ``ExplorationType.RANDOM``.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tdrl.modules import ExplorationType, set_exploration_type
    >>> from tdrl.modules.exploration import EGreedyModule
    >>> from tdrl.specs import Categorical
    >>> module = EGreedyModule(Categorical(3), eps_init=1.0)
    >>> td = TensorDict(action=torch.zeros(4, dtype=torch.int64), batch_size=[4])
    >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
    ...     module(td)["action"].tolist()
    [0, 0, 0, 0]
"""

from tdrl.modules.exploration._egreedy import EGreedyModule
from tdrl.modules.exploration._gaussian import AdditiveGaussianModule
from tdrl.modules.exploration._ou import OrnsteinUhlenbeckProcessModule

__all__ = ["AdditiveGaussianModule", "EGreedyModule", "OrnsteinUhlenbeckProcessModule"]
