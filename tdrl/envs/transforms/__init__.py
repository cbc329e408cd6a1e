"""Env transforms: the Transform mechanism, TransformedEnv, Compose and the transform set.

A :class:`Transform` maps what an env produces (observations, rewards, done leaves) and what it
reads (actions); :class:`TransformedEnv` runs an env through a sequence of them and exposes the
transformed specs. The same transform object also works outside an env (``transform(td)`` on a
replay-buffer sample) and inside :class:`Compose`.

Examples:
    >>> from tdrl.envs.transforms import Compose, RewardSum, StepCounter, TransformedEnv
    >>> from tdrl.testing import CountingEnv
    >>> env = TransformedEnv(CountingEnv(batch_size=(4,)), Compose(StepCounter(10), RewardSum()))
    >>> env.rollout(3)["next", "episode_reward"][:, -1].flatten().tolist()
    [3.0, 3.0, 3.0, 3.0]
"""

from tdrl.envs.transforms._action_mask import ActionMask
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._compose import Compose
from tdrl.envs.transforms._env import TransformedEnv
from tdrl.envs.transforms._episode import InitTracker, RewardSum
from tdrl.envs.transforms._primer import TensorDictPrimer
from tdrl.envs.transforms._step_counter import StepCounter

__all__ = [
    "ActionMask",
    "Compose",
    "InitTracker",
    "RewardSum",
    "StepCounter",
    "TensorDictPrimer",
    "Transform",
    "TransformedEnv",
]
