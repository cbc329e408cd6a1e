"""Env transforms: the Transform mechanism, TransformedEnv, Compose and the transform set.

A :class:`Transform` maps what an env produces (observations, rewards, done leaves) and what it
reads (actions); :class:`TransformedEnv` runs an env through a sequence of them and exposes the
transformed specs. The same transform object also works outside an env (``transform(td)`` on a
replay-buffer sample) and inside :class:`Compose`.

- Return-to-go (Decision Transformer): :class:`Reward2GoTransform` (buffer data),
  :class:`TargetReturn` (the env at evaluation).
- Episode bookkeeping: :class:`StepCounter`, :class:`TrajCounter`, :class:`RewardSum`,
  :class:`InitTracker`, :class:`TensorDictPrimer` (policy states), :class:`ActionMask`.
- Normalisation and values: :class:`ObservationNorm`, :class:`VecNorm`, :class:`RewardScaling`,
  :class:`RewardClipping`, :class:`ClipTransform`, :class:`SignTransform`,
  :class:`BinarizeReward`.
- Types and devices: :class:`DTypeCastTransform`, :class:`DoubleToFloat`, :class:`DeviceCastTransform`.
- Keys and shapes: :class:`CatTensors`, :class:`RenameTransform`,
  :class:`ExcludeTransform`, :class:`SelectTransform`, :class:`UnsqueezeTransform`, :class:`FlattenObservation`.
  :class:`SqueezeTransform`, :class:`PermuteTransform`.
- Frames and images: :class:`CatFrames`, :class:`ToTensorImage`, :class:`Resize`,
  :class:`GrayScale`, :class:`Crop`, :class:`CenterCrop`.
- Env control: :class:`FrameSkipTransform`, :class:`NoopResetEnv`.
- Atari: :class:`EndOfLifeTransform`, :func:`make_atari_env` (the DQN preprocessing stack).

Examples:
    >>> from tdrl.envs.transforms import Compose, RewardSum, StepCounter, TransformedEnv
    >>> from tdrl.testing import CountingEnv
    >>> env = TransformedEnv(CountingEnv(batch_size=(4,)), Compose(StepCounter(10), RewardSum()))
    >>> env.rollout(3)["next", "episode_reward"][:, -1].flatten().tolist()
    [3.0, 3.0, 3.0, 3.0]
"""

from tdrl.envs.transforms._action_mask import ActionMask
from tdrl.envs.transforms._atari import EndOfLifeTransform
from tdrl.envs.transforms._atari_env import make_atari_env
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._casts import DeviceCastTransform, DoubleToFloat, DTypeCastTransform
from tdrl.envs.transforms._cat_frames import CatFrames
from tdrl.envs.transforms._compose import Compose
from tdrl.envs.transforms._control import FrameSkipTransform, NoopResetEnv
from tdrl.envs.transforms._env import TransformedEnv
from tdrl.envs.transforms._episode import InitTracker, RewardSum
from tdrl.envs.transforms._images import CenterCrop, Crop, GrayScale, Resize, ToTensorImage
from tdrl.envs.transforms._key_ops import (
    CatTensors,
    ExcludeTransform,
    RenameTransform,
    SelectTransform,
)
from tdrl.envs.transforms._obs_norm import ObservationNorm
from tdrl.envs.transforms._observation import ObservationTransform
from tdrl.envs.transforms._primer import TensorDictPrimer
from tdrl.envs.transforms._reward2go import Reward2GoTransform, TargetReturn
from tdrl.envs.transforms._shapes import (
    FlattenObservation,
    PermuteTransform,
    SqueezeTransform,
    UnsqueezeTransform,
)
from tdrl.envs.transforms._step_counter import StepCounter
from tdrl.envs.transforms._traj_counter import TrajCounter
from tdrl.envs.transforms._value_maps import (
    BinarizeReward,
    ClipTransform,
    RewardClipping,
    RewardScaling,
    SignTransform,
)
from tdrl.envs.transforms._vec_norm import VecNorm

__all__ = [
    "ActionMask",
    "BinarizeReward",
    "CatFrames",
    "CatTensors",
    "CenterCrop",
    "ClipTransform",
    "Compose",
    "Crop",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "ExcludeTransform",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "InitTracker",
    "NoopResetEnv",
    "ObservationNorm",
    "ObservationTransform",
    "PermuteTransform",
    "RenameTransform",
    "Resize",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
    "SignTransform",
    "SqueezeTransform",
    "StepCounter",
    "TargetReturn",
    "TensorDictPrimer",
    "ToTensorImage",
    "TrajCounter",
    "Transform",
    "TransformedEnv",
    "UnsqueezeTransform",
    "VecNorm",
    "make_atari_env",
]
