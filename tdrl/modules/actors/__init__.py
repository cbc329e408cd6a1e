"""Actors and value operators: TensorDict modules with RL default keys.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tdrl.modules.actors import QValueActor
    >>> actor = QValueActor(torch.nn.Linear(3, 4), action_space="categorical")
    >>> actor(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))["action"].shape
    torch.Size([2])
"""

from tdrl.modules.actors._actor import Actor, ValueOperator
from tdrl.modules.actors._actor_critic import (
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
)
from tdrl.modules.actors._dt import DecisionTransformerInferenceWrapper
from tdrl.modules.actors._multistep import MultiStepActorWrapper
from tdrl.modules.actors._probabilistic import ProbabilisticActor
from tdrl.modules.actors._qvalue import QValueActor, QValueModule
from tdrl.modules.actors._safe import SafeModule, SafeSequential
from tdrl.modules.actors._tanh import TanhModule

__all__ = [
    "Actor",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "DecisionTransformerInferenceWrapper",
    "MultiStepActorWrapper",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "SafeModule",
    "SafeSequential",
    "TanhModule",
    "ValueOperator",
]
