"""Collector arguments shared by the single- and multi-process collectors: envs, policies,
devices, compilation and weight sync schemes, resolved with TorchRL's semantics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.collectors._weight_sync import WeightSyncScheme
from tdrl.envs import EnvBase
from tdrl.envs.core._keys import key_tuple

__all__ = [
    "WarmupCompiled",
    "as_device",
    "build_env",
    "compiled_call",
    "policy_outputs",
    "policy_scheme",
    "resolve_devices",
    "resolve_policy",
    "truncated_keys",
]

Policy = Callable[[TensorDictBase], TensorDictBase]


def as_device(owner: str, name: str, value: Any) -> torch.device | None:
    """``torch.device(value)`` (None stays None); per-worker device lists are refused."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        raise TypeError(
            f"{owner}: {name} must be one device (got the sequence {value!r}; expected a "
            "device, str or int). Per-worker devices are not supported by tdrl: pass one device."
        )
    return torch.device(value)


def resolve_devices(
    owner: str, env: EnvBase, device: Any, storing: Any, policy: Any, env_device: Any
) -> tuple[torch.device | None, torch.device | None, torch.device | None]:
    """``(env_device, policy_device, storing_device)`` of a Collector (``device`` is the default
    of the last two); tdrl envs cannot move, so ``env_device`` must be the env's."""
    device_ = as_device(owner, "device", device)
    env_dev = as_device(owner, "env_device", env_device)
    own = env.device
    if env_dev is not None and own is not None and env_dev != own:
        raise ValueError(
            f"{owner}: the env lives on {own} (got env_device={env_dev}; expected the env's "
            "device). tdrl envs cannot be moved: build the env on that device."
        )
    env_dev = env_dev or own
    policy_dev = as_device(owner, "policy_device", policy) or device_
    storing_dev = as_device(owner, "storing_device", storing) or device_
    if policy_dev is not None and env_dev is None:
        env_dev = torch.device("cpu")  # where the policy outputs go back to
    return env_dev, policy_dev, storing_dev


def truncated_keys(owner: str, env: EnvBase) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """``(truncated, done)`` key pairs that ``set_truncated`` marks on a batch's last step."""
    pairs = [
        (key_tuple(g.truncated), key_tuple(g.done))
        for g in env.done_groups
        if g.truncated is not None
    ]
    if not pairs:
        raise ValueError(
            f"{owner}: set_truncated=True needs a truncated entry in the env's done specs (got "
            f"done keys {env.done_keys}; expected a 'truncated' key). Add one to the env's "
            "full_done_spec."
        )
    return pairs


def build_env(
    owner: str, create_env_fn: EnvBase | Callable[..., EnvBase], kwargs: Mapping[str, Any] | None
) -> tuple[EnvBase, bool]:
    """The env (built from ``create_env_fn(**kwargs)`` unless it is one) and whether it was built."""
    if isinstance(create_env_fn, EnvBase):
        if kwargs:
            raise ValueError(
                f"{owner}: create_env_kwargs need an env factory (got an env instance and "
                f"create_env_kwargs={dict(kwargs)!r}). Pass a callable returning the env."
            )
        return create_env_fn, False
    if not callable(create_env_fn):
        raise TypeError(
            f"{owner}: create_env_fn must be an EnvBase or a callable returning one (got "
            f"{type(create_env_fn).__name__}). Pass e.g. lambda: GymEnv('Pendulum-v1')."
        )
    env = create_env_fn(**(kwargs or {}))
    if not isinstance(env, EnvBase):
        raise TypeError(
            f"{owner}: create_env_fn returned a {type(env).__name__} (expected an EnvBase). "
            "Return a tdrl env from the factory."
        )
    return env, True


def resolve_policy(
    owner: str, policy: Policy | None, policy_factory: Callable[[], Policy] | None
) -> Policy | None:
    """``policy``, or a fresh ``policy_factory()``; giving both is an error (as in TorchRL)."""
    if policy_factory is None:
        return policy
    if policy is not None:
        raise ValueError(
            f"{owner}: policy and policy_factory exclude each other (got both; expected at most "
            "one). Pass the policy or the factory that builds it."
        )
    if not callable(policy_factory):
        raise TypeError(
            f"{owner}: policy_factory must be a callable returning a policy (got "
            f"{type(policy_factory).__name__})."
        )
    return policy_factory()


class WarmupCompiled:
    """Calls ``policy`` eagerly for the first ``warmup`` calls, then ``torch.compile(policy)``
    (TorchRL's ``compile_policy`` semantics: ``warmup`` defaults to 1). The arguments are
    checked as ``LossModule.compile``'s, and with inductor random draws use the eager
    generator: a compiled stochastic policy picks the eager actions.

    Examples:
        >>> from tensordict import TensorDict
        >>> call = WarmupCompiled(lambda td: td.set("y", td["x"] + 1), {"backend": "eager"})
        >>> call(TensorDict(x=torch.zeros(2)))["y"].tolist(), call.calls
        ([1.0, 1.0], 1)
    """

    def __init__(
        self, policy: Policy, kwargs: Mapping[str, Any], owner: str = "Collector.__init__"
    ) -> None:
        from tdrl.objectives._compile import compile_kwargs  # imported only when compiling

        options = dict(kwargs)
        self.warmup = int(options.pop("warmup", 1))
        self.policy = policy
        checked = compile_kwargs(f"{owner}: compile_policy", options)
        self.compiled: Policy = torch.compile(policy, **checked)  # type: ignore[assignment]
        self.calls = 0

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        self.calls += 1
        if self.calls <= self.warmup:
            return self.policy(td)
        return self.compiled(td)


def compiled_call(owner: str, policy: Policy | None, compile_policy: Any) -> Policy | None:
    """The callable that runs the policy: ``policy`` itself, or compiled when asked."""
    if compile_policy is None or compile_policy is False:
        return policy
    if compile_policy is not True and not isinstance(compile_policy, Mapping):
        raise TypeError(
            f"{owner}: compile_policy must be a bool or a dict of torch.compile keyword "
            f"arguments (got {type(compile_policy).__name__}). Pass True or e.g. "
            "{'mode': 'reduce-overhead'}."
        )
    if policy is None:
        raise ValueError(
            f"{owner}: compile_policy needs a policy (got policy=None; random actions are not "
            "compiled). Pass a policy or drop compile_policy."
        )
    return WarmupCompiled(policy, {} if compile_policy is True else compile_policy, owner)


def policy_outputs(policy: Any, td: TensorDictBase, action_keys: Any) -> list[tuple[Any, Any]]:
    """``(key, zeros)`` of what ``policy`` writes besides the actions (log-probs, values, next
    hidden states), from a dry run on a copy of ``td``."""
    before = set(td.keys(True, True))
    probe = policy(td.clone())
    return [
        (key, torch.zeros_like(probe.get(key)))
        for key in probe.keys(True, True)
        if key not in before and key not in action_keys
    ]


def policy_scheme(owner: str, schemes: Any) -> WeightSyncScheme | None:
    """The scheme for ``"policy"`` of TorchRL's ``weight_sync_schemes`` (None when not given)."""
    if schemes is None:
        return None
    if not isinstance(schemes, Mapping):
        raise TypeError(
            f"{owner}: weight_sync_schemes must be a dict from model id to scheme (got "
            f"{type(schemes).__name__}). Pass e.g. {{'policy': SharedMemWeightSyncScheme()}}."
        )
    extra = sorted(map(str, set(schemes) - {"policy"}))
    if extra:
        raise ValueError(
            f"{owner}: weight_sync_schemes only syncs the policy in tdrl (got model ids {extra}; "
            "expected only 'policy'). Sync other models yourself."
        )
    scheme = schemes.get("policy")
    if scheme is not None and not isinstance(scheme, WeightSyncScheme):
        raise TypeError(
            f"{owner}: weight_sync_schemes['policy'] must be a WeightSyncScheme (got "
            f"{type(scheme).__name__}). Pass e.g. SharedMemWeightSyncScheme()."
        )
    return scheme
