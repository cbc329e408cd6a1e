"""Losses, value estimators and target-network updaters."""

from tdrl.objectives._a2c import A2CLoss
from tdrl.objectives._base import LossModule, normalize_key
from tdrl.objectives._bc import BCLoss
from tdrl.objectives._cql import CQLLoss, DiscreteCQLLoss
from tdrl.objectives._ddpg import DDPGLoss
from tdrl.objectives._dqn import DQNLoss
from tdrl.objectives._dt import DTLoss, OnlineDTLoss
from tdrl.objectives._ensemble import QEnsemble
from tdrl.objectives._iql import DiscreteIQLLoss, IQLLoss
from tdrl.objectives._mappo import IPPOLoss, MAPPOLoss
from tdrl.objectives._optim import group_optimizers
from tdrl.objectives._policy_gradient import PolicyGradientLoss, distance_loss
from tdrl.objectives._ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from tdrl.objectives._qmixer import QMixerLoss
from tdrl.objectives._redq import REDQLoss
from tdrl.objectives._reinforce import ReinforceLoss
from tdrl.objectives._sac import SACLoss
from tdrl.objectives._sac_discrete import DiscreteSACLoss
from tdrl.objectives._targets import HardUpdate, SoftUpdate, TargetNetUpdater
from tdrl.objectives._td3 import TD3Loss
from tdrl.objectives._td3_bc import TD3BCLoss
from tdrl.objectives.value import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
)

__all__ = [
    "GAE",
    "A2CLoss",
    "BCLoss",
    "CQLLoss",
    "ClipPPOLoss",
    "DDPGLoss",
    "DQNLoss",
    "DTLoss",
    "DiscreteCQLLoss",
    "DiscreteIQLLoss",
    "DiscreteSACLoss",
    "HardUpdate",
    "IPPOLoss",
    "IQLLoss",
    "KLPENPPOLoss",
    "LossModule",
    "MAPPOLoss",
    "MultiAgentGAE",
    "OnlineDTLoss",
    "PPOLoss",
    "PolicyGradientLoss",
    "QEnsemble",
    "QMixerLoss",
    "REDQLoss",
    "ReinforceLoss",
    "SACLoss",
    "SoftUpdate",
    "TD0Estimator",
    "TD1Estimator",
    "TD3BCLoss",
    "TD3Loss",
    "TDLambdaEstimator",
    "TargetNetUpdater",
    "ValueEstimators",
    "distance_loss",
    "group_optimizers",
    "normalize_key",
]
