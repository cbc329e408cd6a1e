"""Plain ``nn.Module`` models: MLP, ConvNet and the NormalParamExtractor head.

Examples:
    >>> import torch
    >>> from tdrl.modules.models import MLP, NormalParamExtractor
    >>> net = torch.nn.Sequential(MLP(out_features=4, num_cells=8), NormalParamExtractor())
    >>> loc, scale = net(torch.zeros(3, 5))
    >>> loc.shape, bool((scale > 0).all())
    (torch.Size([3, 2]), True)
"""

from tdrl.modules.models._conv import ConvNet
from tdrl.modules.models._decision_transformer import DecisionTransformer
from tdrl.modules.models._dt_actors import DTActor, OnlineDTActor
from tdrl.modules.models._dueling import DuelingCnnDQNet, DuelingMlpDQNet
from tdrl.modules.models._layers import SquashDims
from tdrl.modules.models._mixers import QMixer, VDNMixer
from tdrl.modules.models._mlp import MLP
from tdrl.modules.models._multiagent import MultiAgentMLP
from tdrl.modules.models._multiagent_conv import MultiAgentConvNet
from tdrl.modules.models._normal_params import NormalParamExtractor

__all__ = [
    "MLP",
    "ConvNet",
    "DTActor",
    "DecisionTransformer",
    "DuelingCnnDQNet",
    "DuelingMlpDQNet",
    "MultiAgentConvNet",
    "MultiAgentMLP",
    "NormalParamExtractor",
    "OnlineDTActor",
    "QMixer",
    "SquashDims",
    "VDNMixer",
]
