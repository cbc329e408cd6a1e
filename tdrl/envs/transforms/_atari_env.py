"""make_atari_env: an ALE game with the DQN preprocessing, as tdrl transforms."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.libs import GymEnv
from tdrl.envs.transforms._atari import EndOfLifeTransform
from tdrl.envs.transforms._cat_frames import CatFrames
from tdrl.envs.transforms._compose import Compose
from tdrl.envs.transforms._control import FrameSkipTransform, NoopResetEnv
from tdrl.envs.transforms._env import TransformedEnv
from tdrl.envs.transforms._images import Resize
from tdrl.envs.transforms._key_ops import RenameTransform
from tdrl.envs.transforms._shapes import UnsqueezeTransform
from tdrl.envs.transforms._value_maps import SignTransform

__all__ = ["make_atari_env"]


class _PlayNoop:
    """A policy that writes the NOOP action (action 0 of every ALE game)."""

    def __init__(self, key: NestedKey, action: torch.Tensor) -> None:
        self.key, self.action = key, action

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.set(self.key, self.action.clone())


def make_atari_env(
    env_id: str,
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    frame_stack: int = 4,
    end_of_life: bool = True,
    sign_reward: bool = True,
    device: torch.device | str | None = None,
    **kwargs: Any,
) -> TransformedEnv:
    """An ALE game with the standard (DQN, Nature 2015) preprocessing, as tdrl transforms.

    The stack reproduces gymnasium's ``AtariPreprocessing(noop_max, frame_skip, screen_size)`` +
    ``FrameStackObservation(frame_stack)`` frame for frame on the same seed (see the tests):

    1. :class:`NoopResetEnv`: after each reset, 1 to ``noop_max`` NOOP actions (skipped for
       ``noop_max=0``). The count comes from torch's random generator, not the game's.
    2. :class:`FrameSkipTransform` with ``max_pool_keys``: each action is repeated
       ``frame_skip`` times on the game (built with ``frameskip=1``), rewards summed, and the
       screen is the maximum of the last two frames; the repetition stops where the episode
       ends, as in gymnasium (whose screen at that step is a stale one; tdrl's is the last).
    3. The screen in gray (ALE's own luminance, ``obs_type="grayscale"``) as ``"pixels"``,
       uint8 ``[1, H, W]``, shrunk to ``screen_size`` x ``screen_size`` by area averaging
       (:class:`Resize` ``"area"``, OpenCV's ``INTER_AREA`` as gymnasium).
    4. :class:`CatFrames`: the last ``frame_stack`` screens, uint8 ``[frame_stack, 84, 84]``,
       padded with the first screen after a reset (skipped for ``frame_stack=1``).
    5. :class:`EndOfLifeTransform` (``end_of_life``): ``"end-of-life"`` and ``"lives"``
       entries; the episode goes on after a lost life (gymnasium's default,
       ``terminal_on_life_loss=False``); point the loss at the flag with ``register_keys``.
    6. :class:`SignTransform` on the reward (``sign_reward``): rewards become -1, 0 or 1
       (not part of gymnasium's wrapper).

    Sticky actions and the other game settings are the id's (``repeat_action_probability``
    0.25 for ``-v5``); change them through ``kwargs``. For batched envs build the stack in
    each worker: ``ParallelEnv(n, lambda: make_atari_env(env_id))``. To keep a replay buffer
    lean, store single frames (``frame_stack=1``) and stack sampled slices with
    ``CatFrames.forward`` (see the tests).

    Args:
        env_id: an ALE id, e.g. ``"ALE/Breakout-v5"``.
        noop_max: the largest number of NOOP actions after a reset (0: none).
        frame_skip: how many frames each action lasts.
        screen_size: the side of the square screen.
        frame_stack: how many screens are stacked (1: none).
        end_of_life: add the end-of-life signal.
        sign_reward: clip the rewards to their sign.
        device: device of the data and specs.
        **kwargs: passed to :class:`~tdrl.envs.libs.GymEnv` (``categorical_action_encoding``,
            ``repeat_action_probability``, ``full_action_space``, ...).

    Examples:
        >>> env = make_atari_env("ALE/Pong-v5", noop_max=0)
        >>> data = env.rollout(3)
        >>> data["next", "pixels"].shape, data["next", "pixels"].dtype
        (torch.Size([3, 4, 84, 84]), torch.uint8)
        >>> env.close()
    """
    for name, value, least in (
        ("noop_max", noop_max, 0),
        ("frame_skip", frame_skip, 1),
        ("screen_size", screen_size, 1),
        ("frame_stack", frame_stack, 1),
    ):
        if value < least:
            raise ValueError(
                f"make_atari_env: {name} is too small (got {value}; expected >= {least}). "
                f"Pass a larger {name}."
            )
    for name in ("frame_skip", "obs_type", "from_pixels"):
        if name in kwargs:
            raise ValueError(
                f"make_atari_env: {name} is set by the preprocessing (got {name}="
                f"{kwargs[name]!r}; expected it absent). The game runs with frameskip=1 and "
                "grayscale screens; use the frame_skip argument of make_atari_env."
            )
    base = GymEnv(env_id, frame_skip=1, obs_type="grayscale", device=device, **kwargs)
    transforms: list[Any] = []
    if noop_max > 0:
        key, spec = base.action_key, base.action_spec
        noop = spec.encode(0).to(dtype=spec.dtype, device=spec.device)
        noops = NoopResetEnv(noop_max, policy=_PlayNoop(key, noop), count_range=(1, noop_max))
        transforms.append(noops)
    transforms += [
        FrameSkipTransform(frame_skip, max_pool_keys=["observation"], stop_on_done=True),
        RenameTransform(["observation"], ["pixels"]),
        UnsqueezeTransform(-3, in_keys=["pixels"]),
        Resize(screen_size, screen_size, interpolation="area", in_keys=["pixels"]),
    ]
    if frame_stack > 1:
        transforms.append(CatFrames(frame_stack, -3, in_keys=["pixels"]))
    if end_of_life:
        transforms.append(EndOfLifeTransform())
    if sign_reward:
        transforms.append(SignTransform(in_keys=list(base.reward_keys)))
    return TransformedEnv(base, Compose(*transforms))
