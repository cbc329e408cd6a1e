"""``add_policy_primers``: give an env the entries a recurrent policy carries between steps."""

from __future__ import annotations

from typing import Any

from torch import nn

from tdrl.envs import Compose, EnvBase, InitTracker, Transform, TransformedEnv

__all__ = ["add_policy_primers", "recurrent_modules"]


def recurrent_modules(policy: Any) -> list[Any]:
    """The submodules of ``policy`` that have a ``make_tensordict_primer`` method (each once).

    Examples:
        >>> import torch
        >>> from tdrl.modules.rnn import GRUModule
        >>> gru = GRUModule(2, 4, in_key="obs", out_key="features")
        >>> recurrent_modules(torch.nn.Sequential(gru, torch.nn.Identity())) == [gru]
        True
    """
    if not isinstance(policy, nn.Module):
        return []
    return [m for m in policy.modules() if callable(getattr(m, "make_tensordict_primer", None))]


def _leaf(key: Any) -> str:
    return key if isinstance(key, str) else str(key[-1])


def add_policy_primers(env: EnvBase, policy: Any, *, init_tracker: bool = True) -> TransformedEnv:
    """Wraps ``env`` so that it carries the hidden states of every recurrent module of ``policy``.

    A recurrent module (an :class:`~tdrl.modules.rnn.LSTMModule`, a
    :class:`~tdrl.modules.rnn.GRUModule`, or any module with a ``make_tensordict_primer``
    method) reads its hidden state from the data and writes the next one under ``"next"``. Its
    primer declares those entries in the env's specs, so that they exist after ``reset`` (zeros
    where a reset happens), ``step_mdp`` carries them from step to step, and batched envs and
    collectors preallocate them. With ``init_tracker`` an :class:`~tdrl.envs.InitTracker` is
    added too when the env has no ``is_init`` entry yet: recurrent modules zero their state where
    it is true, and need it to replay stored sequences.

    Primers whose entries the env already has are skipped (calling this twice adds nothing);
    the env itself is not modified.

    Args:
        env: any env (a :class:`~tdrl.envs.SerialEnv` or :class:`~tdrl.envs.ParallelEnv`
            included: the states then live in this process).
        policy: the policy; its submodules are searched.
        init_tracker: also add the ``InitTracker`` the recurrent modules read.

    Returns:
        A :class:`~tdrl.envs.TransformedEnv` around ``env`` (with no transform when the policy
        has no recurrent module or the env has every entry already).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from tdrl.modules.rnn import LSTMModule
        >>> from tdrl.testing import CountingEnv
        >>> lstm = LSTMModule(1, 8, in_key="observation", out_key="features")
        >>> head = TensorDictModule(torch.nn.Linear(8, 1), ["features"], ["action"])
        >>> env = add_policy_primers(CountingEnv(batch_size=(3,)), TensorDictSequential(lstm, head))
        >>> td = env.reset()
        >>> td["recurrent_state_h"].shape, td["is_init"].all().item()
        (torch.Size([3, 1, 8]), True)
    """
    have = set(env.full_observation_spec.keys(True, True))
    transforms: list[Transform] = []
    added: set[Any] = set()
    init_keys: list[Any] = []
    for module in recurrent_modules(policy):
        primer = module.make_tensordict_primer()
        keys = set(primer.primers)
        if keys <= have | added:
            continue
        clash = keys & (have | added)
        if clash:
            raise KeyError(
                f"add_policy_primers: {type(module).__name__} primes entries that another module "
                f"or the env already has (got {sorted(map(str, clash))}; expected all or none of "
                f"{sorted(map(str, keys))}). Give the recurrent modules distinct state_keys."
            )
        transforms.append(primer)
        added |= keys
        init_key = getattr(module, "is_init_key", None)
        if init_key is not None and init_key not in have and init_key not in init_keys:
            init_keys.append(init_key)
    if init_tracker:
        for name in dict.fromkeys(_leaf(k) for k in init_keys):
            transforms.append(InitTracker(init_key=name))
    return TransformedEnv(env, Compose(*transforms))
