"""``check_env_specs``: a short rollout compared against the specs and ``fake_tensordict``."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from tdrl.envs.core._base import EnvBase
from tdrl.errors import SpecError

__all__ = ["check_env_specs"]


def _leaf_keys(td: TensorDictBase) -> set:
    return {k for k in td.keys(True, True)}


def check_env_specs(env: EnvBase, num_steps: int = 3, seed: int | None = 0) -> None:
    """Checks that what an env produces matches its specs; raises naming the key that differs.

    A rollout of ``num_steps`` steps (with partial resets) is compared with
    ``env.fake_tensordict()``: the same keys, the same shapes (plus the time dim) and dtypes, and
    every value inside its spec.

    Args:
        env: the env to check.
        num_steps: rollout length.
        seed: seed given to ``env.set_seed`` first (None: leave the env's generator alone).

    Raises:
        SpecError: with the key, the expected spec and what came.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> check_env_specs(CountingEnv(batch_size=(2,)))
    """
    name = type(env).__name__
    if seed is not None:
        env.set_seed(seed)
    fake = env.fake_tensordict()
    _compare(name, env.rand_step(), fake, "")
    rollout = env.rollout(num_steps, break_when_any_done=False)
    fake = fake.unsqueeze(-1).expand(*fake.batch_size, rollout.batch_size[-1])
    _compare(name, rollout, fake, ", time dim included")
    _check_values(env, rollout)


def _compare(name: str, data: TensorDictBase, fake: TensorDictBase, note: str) -> None:
    want = _leaf_keys(fake)
    _compare_keys(name, _leaf_keys(data), want)
    for key in sorted(want, key=str):
        a, b = data.get(key), fake.get(key)
        if isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
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
