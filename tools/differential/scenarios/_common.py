"""Pieces the scenarios share, written once against ``lib``: a tiny deterministic env, a
deterministic policy, and a deterministic way to fill parameters."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

_ENV_CLASSES: dict[str, type] = {}


def count_env_class(lib: Any) -> type:
    """``CountEnv`` subclassing ``lib.envs.EnvBase`` (one class per library).

    ``CountEnv(batch_size, horizon)``: the observation is the step count of the episode (float32,
    ``[*batch, 1]``); the action a float in ``[-1, 1]`` (``[*batch, 1]``); the reward
    ``action + 0.1 * count``. Row ``i`` of the flattened batch terminates after ``horizon + i``
    steps. ``_reset`` honours ``"_reset"`` (only those rows restart).
    """
    if lib.name in _ENV_CLASSES:
        return _ENV_CLASSES[lib.name]
    data = lib.data

    class CountEnv(lib.envs.EnvBase):
        def __init__(
            self,
            batch_size: tuple[int, ...] = (),
            horizon: int = 3,
            dtype: torch.dtype = torch.float32,
        ) -> None:
            super().__init__(batch_size=torch.Size(batch_size))
            bs = tuple(batch_size)
            self.obs_dtype = dtype
            self.horizon = (
                horizon + torch.arange(max(1, int(torch.Size(bs).numel()))).reshape(*bs, 1).float()
            )
            self.count = torch.zeros(*bs, 1)
            self.observation_spec = data.Composite(
                observation=data.Unbounded(shape=(*bs, 1), dtype=dtype), shape=bs
            )
            self.action_spec = data.Bounded(low=-1.0, high=1.0, shape=(*bs, 1))
            self.reward_spec = data.Unbounded(shape=(*bs, 1))
            flag = {"n": 2, "shape": (*bs, 1), "dtype": torch.bool}
            self.done_spec = data.Composite(
                done=data.Categorical(**flag),
                terminated=data.Categorical(**flag),
                truncated=data.Categorical(**flag),
                shape=bs,
            )

        def _reset(self, td: Any) -> Any:
            mask = None if td is None else td.get("_reset", None)
            if mask is None:
                self.count.zero_()
            else:
                self.count[mask.expand_as(self.count)] = 0.0
            zeros = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
            return TensorDict(
                observation=self.count.to(self.obs_dtype, copy=True),
                done=zeros,
                terminated=zeros.clone(),
                truncated=zeros.clone(),
                batch_size=self.batch_size,
            )

        def _step(self, td: Any) -> Any:
            self.count = self.count + 1
            terminated = self.count >= self.horizon
            return TensorDict(
                observation=self.count.to(self.obs_dtype, copy=True),
                reward=td["action"] + 0.1 * self.count,
                done=terminated.clone(),
                terminated=terminated,
                truncated=torch.zeros_like(terminated),
                batch_size=self.batch_size,
            )

        def _set_seed(self, seed: int | None) -> None:
            return None

    _ENV_CLASSES[lib.name] = CountEnv
    return CountEnv


def count_env(
    lib: Any, batch_size: tuple[int, ...] = (), horizon: int = 3, dtype: torch.dtype = torch.float32
) -> Any:
    return count_env_class(lib)(batch_size, horizon, dtype)


_PIXEL_CLASSES: dict[str, type] = {}


def pixel_env(lib: Any, batch_size: tuple[int, ...] = (2,)) -> Any:
    """A ``CountEnv`` that also shows ``"pixels"``: uint8 ``[*batch, 6, 8, 3]`` images whose values
    follow the count (deterministic)."""
    if lib.name not in _PIXEL_CLASSES:
        base = count_env_class(lib)

        class PixelEnv(base):  # type: ignore[misc, valid-type]
            def __init__(self, batch_size: tuple[int, ...]) -> None:
                super().__init__(batch_size, 4)
                bs = tuple(batch_size)
                spec = self.observation_spec.clone()
                spec["pixels"] = lib.data.Bounded(
                    low=0, high=255, shape=(*bs, 6, 8, 3), dtype=torch.uint8
                )
                self.observation_spec = spec
                self.pattern = (torch.arange(6 * 8 * 3).reshape(6, 8, 3) * 7) % 200

            def _pixels(self) -> torch.Tensor:
                count = self.count.reshape(*self.count.shape[:-1], 1, 1, 1)
                return (self.pattern + 10 * count).clamp(0, 255).to(torch.uint8)

            def _reset(self, td: Any) -> Any:
                out = super()._reset(td)
                out["pixels"] = self._pixels()
                return out

            def _step(self, td: Any) -> Any:
                out = super()._step(td)
                out["pixels"] = self._pixels()
                return out

        _PIXEL_CLASSES[lib.name] = PixelEnv
    return _PIXEL_CLASSES[lib.name](batch_size)


class TanhOfObs(nn.Module):
    """A deterministic policy: ``tanh(0.3 * obs - 0.5)``."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(0.3 * obs - 0.5)


def det_policy() -> TensorDictModule:
    return TensorDictModule(TanhOfObs(), in_keys=["observation"], out_keys=["action"])


class LocScale(nn.Module):
    """``loc, scale`` of a Gaussian policy in plain torch (the libraries' NormalParamExtractor
    map scales differently: that is an actors scenario, kept out of the losses).
    ``fixed_scale`` gives every action the same scale (near-deterministic samples)."""

    def __init__(
        self, seed: int, fixed_scale: float | None = None, obs: int = 3, act: int = 2
    ) -> None:
        super().__init__()
        self.net = mlp([obs, 8, 2 * act], seed=seed)
        self.fixed_scale = fixed_scale

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, raw = self.net(obs).chunk(2, -1)
        if self.fixed_scale is not None:
            return loc, torch.full_like(raw, self.fixed_scale)
        return loc, nn.functional.softplus(raw) + 0.1


def fill_(params: Any, seed: int, scale: float = 0.3) -> None:
    """Overwrite every leaf of ``params`` (a TensorDict or module) with seeded values, in order."""
    gen = torch.Generator().manual_seed(seed)
    if hasattr(params, "keys"):  # TensorDict (TensorDictParams is a module too: not its params)
        leaves = [params.get(k) for k in params.keys(include_nested=True, leaves_only=True)]
    else:
        leaves = [p for _, p in params.named_parameters()]
    with torch.no_grad():
        for leaf in leaves:
            value = torch.randn(leaf.shape, generator=gen) * scale
            leaf.data.copy_(value)


def mlp(sizes: list[int], seed: int, act: type[nn.Module] = nn.Tanh) -> nn.Sequential:
    """A plain torch MLP (identical in both libraries) with seeded weights."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    net = nn.Sequential(*layers)
    fill_(net, seed)
    return net


def rand(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def keys_of(td: Any) -> list[str]:
    return sorted(
        "/".join(k) if isinstance(k, tuple) else k
        for k in td.keys(include_nested=True, leaves_only=True)
    )


def count_env_factory(lib_name: str, horizon: int = 3) -> Any:
    """A picklable ``CountEnv`` factory for worker processes (resolves the library there)."""
    import functools

    return functools.partial(_make_count_env, lib_name, horizon)


def _make_count_env(lib_name: str, horizon: int) -> Any:
    from ..lib import load

    return count_env(load(lib_name), (), horizon)
