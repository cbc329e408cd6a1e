"""``check_env_specs``: a short rollout compared against the specs and ``fake_tensordict``."""

from __future__ import annotations

from typing import Literal

import torch
from tensordict import TensorDictBase

from tdrl.envs.core._base import EnvBase
from tdrl.errors import SpecError

__all__ = ["check_env_specs"]


def _leaf_keys(td: TensorDictBase) -> set:
    return {k for k in td.keys(True, True)}


def check_env_specs(
    env: EnvBase,
    return_contiguous: bool | None = None,
    check_dtype: bool = True,
    seed: int | None = None,
    tensordict: TensorDictBase | None = None,
    break_when_any_done: bool | Literal["both"] | None = None,
    *,
    num_steps: int = 3,
) -> None:
    """Checks that what an env produces matches its specs; raises naming the key that differs.

    TorchRL's arguments: a random rollout of ``num_steps`` steps (one reset, as TorchRL) is
    compared with ``env.fake_tensordict()``: the same keys, the same shapes (plus the time dim)
    and dtypes, and every value inside its spec.

    Args:
        env: the env to check.
        return_contiguous: accepted for TorchRL compatibility: tdrl rollouts are always
            contiguous.
        check_dtype: compare dtypes too.
        seed: if given, ``env.set_seed(seed)`` and torch's global generator are seeded for the
            check, and torch's generator state is restored afterwards.
        tensordict: start the rollout from it (no reset) instead of ``env.reset()``.
        break_when_any_done: the rollout's ``break_when_any_done`` (``None``: True);
            ``"both"`` checks with True, then with False (partial resets).
        num_steps: rollout length (tdrl's addition).

    Raises:
        SpecError: with the key, the expected spec and what came.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> check_env_specs(CountingEnv(batch_size=(2,)), break_when_any_done="both")
    """
    if break_when_any_done == "both":
        for flag in (True, False):
            check_env_specs(env, None, check_dtype, seed, tensordict, flag, num_steps=num_steps)
        return
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            env.set_seed(seed)
            check_env_specs(
                env, None, check_dtype, None, tensordict, break_when_any_done, num_steps=num_steps
            )
        return
    name = type(env).__name__
    fake = env.fake_tensordict()
    # one rollout, as TorchRL: the env and the random generators are used as TorchRL uses
    # them, so a seeded script that checks its env first goes on with the same draws
    stop = True if break_when_any_done is None else bool(break_when_any_done)
    start = None if tensordict is None else tensordict.clone()
    try:
        rollout = env.rollout(
            num_steps, break_when_any_done=stop, auto_reset=start is None, tensordict=start
        )
    except (RuntimeError, KeyError) as err:
        # e.g. steps whose keys differ cannot be stacked: one step names the entry
        try:
            _compare(name, env.rand_step(), fake, "", check_dtype)
        except SpecError as named:
            raise named from err
        raise
    fake = fake.unsqueeze(-1).expand(*fake.batch_size, rollout.batch_size[-1])
    _compare(name, rollout, fake, ", time dim included", check_dtype)
    _check_values(env, rollout)


def _compare(
    name: str, data: TensorDictBase, fake: TensorDictBase, note: str, check_dtype: bool
) -> None:
    want = _leaf_keys(fake)
    _compare_keys(name, _leaf_keys(data), want)
    for key in sorted(want, key=str):
        a, b = data.get(key), fake.get(key)
        if isinstance(a, torch.Tensor) and (
            a.shape != b.shape or (check_dtype and a.dtype != b.dtype)
        ):
            raise SpecError(
                f"check_env_specs: {name} entry {key!r} does not match its spec (got shape "
                f"{tuple(a.shape)} and dtype {a.dtype}; expected shape {tuple(b.shape)} and dtype "
                f"{b.dtype}{note}). Make _reset/_step produce what the spec declares."
            )


def _compare_keys(name: str, got: set, want: set) -> None:
    if got != want:
        missing = sorted(map(str, want - got))
        extra = sorted(map(str, got - want))
        raise SpecError(
            f"check_env_specs: {name} produced keys that differ from its specs (missing from the "
            f"data: {missing}; not in any spec: {extra}). Declare every entry in a spec and write "
            "every declared entry."
        )


def _check_values(env: EnvBase, rollout: TensorDictBase) -> None:
    t = rollout.ndim - 1
    specs = [
        (env.full_observation_spec, ("root", "next")),
        (env.full_done_spec, ("root", "next")),
        (env.full_state_spec, ("root",)),
        (env.full_action_spec, ("root",)),
        (env.full_reward_spec, ("next",)),
    ]
    for spec, where in specs:
        for key in spec.keys(True, True):
            leaf = spec[key]
            if spec is env.full_action_spec and getattr(leaf, "mask", None) is not None:
                # An action mask follows the state: each action was legal under the mask of its
                # own step, which the spec no longer holds once the rollout is over.
                leaf = leaf.clone()
                leaf.update_mask(None)
            for place in where:
                full = (
                    key if place == "root" else ("next", *((key,) if isinstance(key, str) else key))
                )
                for i in range(rollout.shape[t]):
                    value = rollout.get(full).select(t, i)
                    if isinstance(value, torch.Tensor) and not leaf.is_in(value):
                        leaf.assert_is_in(value, key=full)
