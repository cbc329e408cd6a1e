"""TorchRL's ``torchrl.modules.tensordict_module`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules`), so code
written ``from torchrl.modules.tensordict_module import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.tensordict_module import Actor
    >>> import tdrl.modules
    >>> Actor is tdrl.modules.Actor
    True
"""

from tdrl.modules import (
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    AdditiveGaussianModule,
    DecisionTransformerInferenceWrapper,
    EGreedyModule,
    GRUModule,
    LSTMModule,
    MultiStepActorWrapper,
    OrnsteinUhlenbeckProcessModule,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    RecurrentModuleBase,
    SafeModule,
    SafeSequential,
    TanhModule,
    ValueOperator,
)

__all__ = [
    "Actor",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "AdditiveGaussianModule",
    "DecisionTransformerInferenceWrapper",
    "EGreedyModule",
    "GRUModule",
    "LSTMModule",
    "MultiStepActorWrapper",
    "OrnsteinUhlenbeckProcessModule",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "RecurrentModuleBase",
    "SafeModule",
    "SafeSequential",
    "TanhModule",
    "ValueOperator",
]
