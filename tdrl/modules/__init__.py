"""Policies and networks: plain models, actors, distributions, exploration and recurrent modules.

Everything is built on ``tensordict.nn``: actors are ``TensorDictModule`` /
``ProbabilisticTensorDictSequential`` instances that read and write keys of a TensorDict.
``RandomPolicy`` (uniform actions from a spec) is re-exported from ``tdrl.envs``, as TorchRL
has it in both places.
:class:`set_exploration_type` is the one global mode: probabilistic actors sample under
``RANDOM`` (the default) and exploration modules are off under any other type.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tdrl.modules import MLP, Actor
    >>> actor = Actor(MLP(out_features=2, num_cells=16))
    >>> actor(TensorDict(observation=torch.zeros(3, 5), batch_size=[3]))["action"].shape
    torch.Size([3, 2])
"""

from tdrl.envs.core import RandomPolicy
from tdrl.envs.core._exploration_type import (
    ExplorationType,
    exploration_type,
    set_exploration_type,
)
from tdrl.modules._value_norm import (
    PercentileValueNorm,
    PopArtValueNorm,
    RunningValueNorm,
    ValueNorm,
)
from tdrl.modules.actors import (
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
from tdrl.modules.distributions import (
    Delta,
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    ReparamGradientStrategy,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)
from tdrl.modules.exploration import (
    AdditiveGaussianModule,
    EGreedyModule,
    OrnsteinUhlenbeckProcessModule,
)
from tdrl.modules.models import (
    MLP,
    ConvNet,
    DecisionTransformer,
    DTActor,
    DuelingCnnDQNet,
    MultiAgentConvNet,
    MultiAgentMLP,
    NormalParamExtractor,
    OnlineDTActor,
    QMixer,
    VDNMixer,
)
from tdrl.modules.rnn import (
    GRUModule,
    LSTMModule,
    RecurrentModuleBase,
    recurrent_mode,
    set_recurrent_mode,
)

__all__ = [
    "MLP",
    "Actor",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "AdditiveGaussianModule",
    "ConvNet",
    "DTActor",
    "DecisionTransformer",
    "DecisionTransformerInferenceWrapper",
    "Delta",
    "DuelingCnnDQNet",
    "EGreedyModule",
    "ExplorationType",
    "GRUModule",
    "IndependentNormal",
    "LSTMModule",
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "MultiAgentConvNet",
    "MultiAgentMLP",
    "MultiStepActorWrapper",
    "NormalParamExtractor",
    "OneHotCategorical",
    "OnlineDTActor",
    "OrnsteinUhlenbeckProcessModule",
    "PercentileValueNorm",
    "PopArtValueNorm",
    "ProbabilisticActor",
    "QMixer",
    "QValueActor",
    "QValueModule",
    "RandomPolicy",
    "RecurrentModuleBase",
    "ReparamGradientStrategy",
    "RunningValueNorm",
    "SafeModule",
    "SafeSequential",
    "TanhDelta",
    "TanhModule",
    "TanhNormal",
    "TruncatedNormal",
    "VDNMixer",
    "ValueNorm",
    "ValueOperator",
    "exploration_type",
    "recurrent_mode",
    "set_exploration_type",
    "set_recurrent_mode",
]
