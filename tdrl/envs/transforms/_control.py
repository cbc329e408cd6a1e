"""Transforms that drive the env below: FrameSkipTransform and NoopResetEnv."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform

__all__ = ["FrameSkipTransform", "NoopResetEnv"]

Policy = Callable[[TensorDictBase], TensorDictBase]


class FrameSkipTransform(Transform):
    """Repeats each action ``frame_skip`` times and sums the rewards.

    The env below (the base env and the transforms placed before this one) steps
    ``frame_skip`` times with the same actions, as in TorchRL: a done inside the skipped frames
    does not stop the repetition (the env is stepped past the end of its episode, and what it
    returns then is its own affair), and the result is the last step's data (its done leaves
    included) with the rewards of every frame summed. Unlike TorchRL, which steps the same
    input again, each repetition starts from the previous one's next root (``step_mdp``), so
    envs that read their state from the data (stateless envs) advance too. Transforms placed
    after it must not change the actions.

    ``max_pool_keys`` (a tdrl addition; TorchRL has no such argument) names observation entries
    that become the element-wise maximum of the last two frames instead of the last one, as
    the DQN Atari preprocessing does (it removes the flicker of sprites drawn every other
    frame; gymnasium's ``AtariPreprocessing`` pools the same two frames). With
    ``frame_skip=1`` there is one frame and nothing is pooled.

    ``stop_on_done`` (a tdrl addition) stops the repetition at the frame where the episode
    ends, as gymnasium's ``AtariPreprocessing`` does: the game is not stepped past its end (an
    ALE game would draw its sticky-action randomness for frames that do not count). The
    result is then that frame's data (pooled with the frame before when there is one). It
    needs an env below with one member (build it inside each worker of a batched env).

    Args:
        frame_skip: how many times each action is applied (>= 1).
        max_pool_keys: entries of the env's output to max-pool over the last two frames
            (keyword-only; default none).
        stop_on_done: stop repeating when the episode ends (keyword-only; default False,
            TorchRL's behaviour).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=7), FrameSkipTransform(3))
        >>> td = env.rollout(5)
        >>> td["next", "observation"].flatten().tolist(), td["next", "reward"].flatten().tolist()
        ([3.0, 6.0, 9.0], [3.0, 3.0, 3.0])
    """

    def __init__(
        self,
        frame_skip: int = 1,
        *,
        max_pool_keys: Sequence[NestedKey] | None = None,
        stop_on_done: bool = False,
    ) -> None:
        if frame_skip < 1:
            raise ValueError(
                f"FrameSkipTransform.__init__: frame_skip must be >= 1 (got {frame_skip}). Pass a "
                "positive number of repeats."
            )
        super().__init__()
        self.frame_skip = int(frame_skip)
        self.max_pool_keys = [unravel_key(k) for k in (max_pool_keys or ())]
        self.stop_on_done = bool(stop_on_done)

    def _bind(self, parent: EnvBase) -> None:
        if self.stop_on_done and parent.batch_size.numel() != 1:
            raise ValueError(
                "FrameSkipTransform: stop_on_done needs an env with one member (got batch size "
                f"{tuple(parent.batch_size)}; expected one member, since the members of a batch "
                "cannot stop at different frames). Put the transform inside each worker."
            )

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent = self._require_parent("_step")
        actions = tensordict.select(*parent.action_keys, strict=False)
        totals = {k: next_tensordict.get(k) for k in parent.reward_keys}
        current = tensordict.copy().set("next", next_tensordict)
        pooled: dict[NestedKey, torch.Tensor] = {}
        for i in range(self.frame_skip - 1):
            if self.stop_on_done and parent.any_done(current.get("next")):
                break
            if i == self.frame_skip - 2:  # the second-to-last frame (copied: envs may reuse it)
                pooled = {
                    k: self._pooled(current.get("next"), k).clone() for k in self.max_pool_keys
                }
            root = parent.step_mdp(current).update(actions)
            current = parent.step(root)
            for key in totals:
                totals[key] = totals[key] + current.get(("next", key))
        out = current.get("next")
        for key, total in totals.items():
            out.set(key, total)
        for key, before in pooled.items():
            out.set(key, torch.maximum(before, self._pooled(out, key)))
        return out  # type: ignore[no-any-return]

    def _pooled(self, next_td: TensorDictBase, key: NestedKey) -> torch.Tensor:
        value = next_td.get(key, None)
        if value is None:
            raise self._missing_key(key, next_td, "_step")
        return value  # type: ignore[no-any-return]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def extra_repr(self) -> str:
        pool = f", max_pool_keys={self.max_pool_keys}" if self.max_pool_keys else ""
        stop = ", stop_on_done=True" if self.stop_on_done else ""
        return f"frame_skip={self.frame_skip}{pool}{stop}"


class NoopResetEnv(Transform):
    """After a full reset, plays a few steps before handing over the env (TorchRL's semantics).

    Used to randomise start states (Atari). The number of steps is ``noops``, or, with
    ``random=True``, a draw of ``torch.randint(noops, (1,))`` (0 to ``noops - 1``, TorchRL's
    draw and random-number use), or of ``count_range=(low, high)`` (inclusive: gymnasium's
    ``AtariPreprocessing`` draws from ``(1, noop_max)``). The steps run on the env below with
    ``policy`` (default: random actions from its action spec, as TorchRL's ``rand_step``). If
    an episode ends during them, the env is reset and the same count is played again, up to 10
    tries (then a ``RuntimeError``), as TorchRL does. The reward of the last extra step is not
    part of the reset output. Partial resets (some members only) are refused: the extra steps
    would move the members that do not reset.

    Args:
        noops: the number of steps (``random=False``) or the bound of the draw.
        random: draw the number of steps (see above).
        policy: writes the actions to play (e.g. the no-op action of an Atari game).
        count_range: ``(low, high)``, the inclusive bounds of the random count (tdrl's option;
            default TorchRL's ``(0, noops - 1)``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=50), NoopResetEnv(noops=4, random=False))
        >>> env.reset()["observation"].item()
        4.0
    """

    max_tries = 10

    def __init__(
        self,
        noops: int = 30,
        random: bool = True,
        policy: Policy | None = None,
        *,
        count_range: tuple[int, int] | None = None,
    ):
        if noops < 1:
            raise ValueError(
                f"NoopResetEnv.__init__: noops must be >= 1 (got {noops}). Pass a positive count."
            )
        if count_range is not None and not 0 <= count_range[0] <= count_range[1]:
            raise ValueError(
                f"NoopResetEnv.__init__: invalid count_range (got {count_range!r}; expected "
                "(low, high) with 0 <= low <= high). Pass e.g. (1, 30)."
            )
        super().__init__()
        self.noops = int(noops)
        self.random = random
        self.policy = policy
        self.count_range = count_range

    def _count(self) -> int:
        if not self.random:
            return self.noops
        if self.count_range is None:
            return int(torch.randint(self.noops, (1,)).item())
        low, high = self.count_range
        return int(torch.randint(low, high + 1, (1,)).item())

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        parent = self._require_parent("_reset")
        if tensordict_in is not None:
            masks = parent._reset_plan.masks(tensordict_in)
            if masks is not None and not all(m is not None and bool(m.all()) for m in masks):
                raise RuntimeError(
                    "NoopResetEnv._reset: partial resets are not supported (got _reset entries that "
                    "are not all true; expected a full reset). Use NoopResetEnv on each sub-env of "
                    "a batched env, or reset every member."
                )
        count = self._count()
        act = self.policy if self.policy is not None else parent.rand_action
        root = tensordict_out
        for _ in range(self.max_tries + 1):
            for _ in range(count):
                root = parent.step_mdp(parent.step(act(root)))
                if parent.any_done(root):
                    root = parent.reset()
                    break
            else:
                return root.exclude(*parent.reward_keys)
        raise RuntimeError(
            f"NoopResetEnv._reset: the env was done before the {count} extra steps could be "
            f"played, {self.max_tries + 1} times in a row (expected episodes longer than "
            f"{count} steps). Use fewer noops."
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def extra_repr(self) -> str:
        extra = f", count_range={self.count_range}" if self.count_range is not None else ""
        return f"noops={self.noops}, random={self.random}{extra}"
