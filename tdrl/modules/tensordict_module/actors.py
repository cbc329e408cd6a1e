"""TorchRL's ``torchrl.modules.tensordict_module.actors`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules`), so code
written ``from torchrl.modules.tensordict_module.actors import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.tensordict_module.actors import ProbabilisticActor
    >>> import tdrl.modules
    >>> ProbabilisticActor is tdrl.modules.ProbabilisticActor
    True
"""

from tdrl.modules import (
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    DecisionTransformerInferenceWrapper,
    MultiStepActorWrapper,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
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
