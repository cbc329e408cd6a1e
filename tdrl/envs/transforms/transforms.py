"""TorchRL's ``torchrl.envs.transforms.transforms`` import path, for custom transforms.

TorchRL's tutorials write custom transforms with
``from torchrl.envs.transforms.transforms import _apply_to_composite``; the same line works
with ``tdrl``. The transforms are those of :mod:`tdrl.envs.transforms`.

Examples:
    >>> from tdrl.envs.transforms.transforms import Transform, _apply_to_composite
    >>> import tdrl.envs.transforms
    >>> Transform is tdrl.envs.transforms.Transform
    True
"""

from tdrl.envs.transforms import (
    ActionMask,
    BinarizeReward,
    CatFrames,
    CatTensors,
    CenterCrop,
    ClipTransform,
    Compose,
    Crop,
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    ExcludeTransform,
    FlattenObservation,
    FrameSkipTransform,
    GrayScale,
    InitTracker,
    NoopResetEnv,
    ObservationNorm,
    ObservationTransform,
    PermuteTransform,
    RenameTransform,
    Resize,
    Reward2GoTransform,
    RewardClipping,
    RewardScaling,
    RewardSum,
    SelectTransform,
    SignTransform,
    SqueezeTransform,
    StepCounter,
    TargetReturn,
    TensorDictPrimer,
    ToTensorImage,
    TrajCounter,
    Transform,
    TransformedEnv,
    UnsqueezeTransform,
    VecNorm,
)
from tdrl.envs.transforms._spec_decorators import _apply_to_composite, _apply_to_composite_inv

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
    "_apply_to_composite",
    "_apply_to_composite_inv",
]
