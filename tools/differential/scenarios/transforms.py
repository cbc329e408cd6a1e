"""Transforms: the specs they produce, what a rollout through them holds, and their state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..registry import capture, scenario
from ._common import count_env, det_policy, pixel_env

STEPS = 5


# The policy reads "observation" ([*batch, 1]): shape-changing transforms write to new keys.


def _specs(env: Any) -> dict[str, Any]:
    return {
        "observation": capture(lambda: env.observation_spec),
        "reward": capture(lambda: env.full_reward_spec),
        "done": capture(lambda: env.full_done_spec),
        "action": capture(lambda: env.full_action_spec),
        "state": capture(lambda: env.full_state_spec),
    }


def _state(transform: Any) -> Any:
    state = transform.state_dict()
    return {k: v for k, v in sorted(state.items()) if isinstance(v, torch.Tensor)}


def run_transform(
    lib: Any,
    make: Callable[[Any], Any],
    *,
    pixels: bool = False,
    dtype: torch.dtype = torch.float32,
    state: bool = False,
    steps: int = STEPS,
) -> dict[str, Any]:
    base = pixel_env(lib) if pixels else count_env(lib, (2,), horizon=3, dtype=dtype)
    transform = make(lib)
    env = lib.envs.TransformedEnv(base, transform)
    out: dict[str, Any] = {"specs": _specs(env)}
    out["rollout"] = capture(lambda: env.rollout(steps, det_policy(), break_when_any_done=False))
    if state:
        out["state"] = capture(lambda: _state(transform))
    return out


CASES: dict[str, tuple[Callable[[Any], Any], dict[str, Any]]] = {
    "ObservationNorm/loc_scale": (
        lambda lib: lib.envs.ObservationNorm(loc=1.0, scale=2.0, in_keys=["observation"]),
        {"state": True},
    ),
    "ObservationNorm/standard_normal": (
        lambda lib: lib.envs.ObservationNorm(
            loc=1.0, scale=2.0, in_keys=["observation"], standard_normal=True
        ),
        {"state": True},
    ),
    "ObservationNorm/out_keys": (
        lambda lib: lib.envs.ObservationNorm(
            loc=1.0, scale=2.0, in_keys=["observation"], out_keys=["obs_norm"]
        ),
        {},
    ),
    "VecNorm/default": (lambda lib: lib.envs.VecNorm(in_keys=["observation"]), {"state": True}),
    "VecNorm/decay0.5": (
        lambda lib: lib.envs.VecNorm(in_keys=["observation", "reward"], decay=0.5),
        {"state": True},
    ),
    "StepCounter/default": (lambda lib: lib.envs.StepCounter(), {}),
    "StepCounter/max_steps=2": (lambda lib: lib.envs.StepCounter(max_steps=2), {}),
    "StepCounter/truncated_key": (
        lambda lib: lib.envs.StepCounter(max_steps=2, truncated_key="cut"),
        {},
    ),
    "RewardSum/default": (lambda lib: lib.envs.RewardSum(), {}),
    "RewardSum/out_keys": (
        lambda lib: lib.envs.RewardSum(in_keys=["reward"], out_keys=["ret"]),
        {},
    ),
    "CatFrames/N=3": (
        lambda lib: lib.envs.CatFrames(N=3, dim=-1, in_keys=["observation"], out_keys=["stack"]),
        {},
    ),
    "CatFrames/padding_same": (
        lambda lib: lib.envs.CatFrames(
            N=3, dim=-1, in_keys=["observation"], out_keys=["stack"], padding="constant"
        ),
        {},
    ),
    "DoubleToFloat/default": (lambda lib: lib.envs.DoubleToFloat(), {"dtype": torch.float64}),
    "DoubleToFloat/in_keys": (
        lambda lib: lib.envs.DoubleToFloat(in_keys=["observation"]),
        {"dtype": torch.float64},
    ),
    "DTypeCastTransform/float16": (
        lambda lib: lib.envs.DTypeCastTransform(
            torch.float32, torch.float16, in_keys=["observation"]
        ),
        {},
    ),
    "Resize/4x4": (
        lambda lib: lib.envs.Resize(4, 4, in_keys=["pixels_t"]),
        {"pixels": True, "compose_image": True},
    ),
    "ToTensorImage/default": (lambda lib: lib.envs.ToTensorImage(), {"pixels": True}),
    "ToTensorImage/from_int": (
        lambda lib: lib.envs.ToTensorImage(in_keys=["pixels"], from_int=True),
        {"pixels": True},
    ),
    "GrayScale/default": (
        lambda lib: lib.envs.GrayScale(in_keys=["pixels_t"]),
        {"pixels": True, "compose_image": True},
    ),
    "CenterCrop/4": (
        lambda lib: lib.envs.CenterCrop(4, in_keys=["pixels_t"]),
        {"pixels": True, "compose_image": True},
    ),
    "FlattenObservation/pixels": (
        lambda lib: lib.envs.FlattenObservation(-3, -1, in_keys=["pixels"]),
        {"pixels": True},
    ),
    "UnsqueezeTransform/dim-1": (
        lambda lib: lib.envs.UnsqueezeTransform(-1, in_keys=["observation"], out_keys=["obs_u"]),
        {},
    ),
    "SqueezeTransform/dim-1": (
        lambda lib: lib.envs.SqueezeTransform(-1, in_keys=["observation"], out_keys=["obs_s"]),
        {},
    ),
    "CatTensors/default": (
        lambda lib: lib.envs.CatTensors(in_keys=["observation", "obs2"], out_key="cat"),
        {"compose_copy": True},
    ),
    "RenameTransform/obs": (
        lambda lib: lib.envs.RenameTransform(in_keys=["observation"], out_keys=["obs"]),
        {},
    ),
    "ExcludeTransform/truncated": (lambda lib: lib.envs.ExcludeTransform("truncated"), {}),
    "SelectTransform/observation": (lambda lib: lib.envs.SelectTransform("observation"), {}),
    "InitTracker/default": (lambda lib: lib.envs.InitTracker(), {}),
    "RewardScaling/loc_scale": (lambda lib: lib.envs.RewardScaling(loc=1.0, scale=2.0), {}),
    "RewardClipping/-0.1_0.1": (lambda lib: lib.envs.RewardClipping(-0.1, 0.1), {}),
    "ClipTransform/observation": (
        lambda lib: lib.envs.ClipTransform(in_keys=["observation"], low=0.5, high=1.5),
        {},
    ),
    "SignTransform/reward": (lambda lib: lib.envs.SignTransform(in_keys=["reward"]), {}),
    "BinarizeReward/default": (lambda lib: lib.envs.BinarizeReward(), {}),
    "FrameSkipTransform/2": (lambda lib: lib.envs.FrameSkipTransform(frame_skip=2), {}),
    "TrajCounter/default": (lambda lib: lib.envs.TrajCounter(), {}),
    "TensorDictPrimer/hidden": (
        lambda lib: lib.envs.TensorDictPrimer(hidden=lib.data.Unbounded(shape=(2, 4))),
        {},
    ),
    "TensorDictPrimer/expand_specs": (
        lambda lib: lib.envs.TensorDictPrimer(
            hidden=lib.data.Unbounded(shape=(4,)), expand_specs=True
        ),
        {},
    ),
    "PermuteTransform/pixels": (
        lambda lib: lib.envs.PermuteTransform((-1, -3, -2), in_keys=["pixels"]),
        {"pixels": True},
    ),
}


def _with_helpers(
    lib: Any, make: Callable[[Any], Any], opts: dict[str, Any]
) -> Callable[[Any], Any]:
    """Prepend the transforms a case needs first (a float CHW image, a second observation)."""
    if opts.get("compose_image"):
        return lambda lib: lib.envs.Compose(
            lib.envs.ToTensorImage(in_keys=["pixels"], out_keys=["pixels_t"]), make(lib)
        )
    if opts.get("compose_copy"):
        return lambda lib: lib.envs.Compose(
            lib.envs.UnsqueezeTransform(-1, in_keys=["observation"], out_keys=["obs2"]),
            lib.envs.SqueezeTransform(-1, in_keys=["obs2"], out_keys=["obs2"]),
            make(lib),
        )
    return make


for _name, (_make, _opts) in CASES.items():

    def _register(
        name: str = _name, make: Callable[[Any], Any] = _make, opts: dict[str, Any] = _opts
    ) -> None:
        @scenario(f"transforms/{name}")
        def _(lib: Any) -> Any:
            kwargs = {k: v for k, v in opts.items() if k in ("pixels", "dtype", "state")}
            return run_transform(lib, _with_helpers(lib, make, opts), **kwargs)

    _register()


@scenario("transforms/ObservationNorm/init_stats")
def _(lib: Any) -> Any:
    transform = lib.envs.ObservationNorm(in_keys=["observation"])
    env = lib.envs.TransformedEnv(count_env(lib, (2,), horizon=3), transform)
    out = {"init": capture(lambda: transform.init_stats(num_iter=6, reduce_dim=(0, 1), cat_dim=1))}
    out["loc"] = capture(lambda: transform.loc)
    out["scale"] = capture(lambda: transform.scale)
    out["rollout"] = capture(lambda: env.rollout(4, det_policy(), break_when_any_done=False))
    return out


@scenario("transforms/ObservationNorm/uninitialized")
def _(lib: Any) -> Any:
    transform = lib.envs.ObservationNorm(in_keys=["observation"])
    env = lib.envs.TransformedEnv(count_env(lib, (2,)), transform)
    return capture(lambda: env.rollout(2, det_policy()))


@scenario("transforms/Compose/append_insert")
def _(lib: Any) -> Any:
    env = lib.envs.TransformedEnv(count_env(lib, (2,)), lib.envs.StepCounter())
    env.append_transform(lib.envs.RewardSum())
    env.insert_transform(0, lib.envs.InitTracker())
    names = [type(t).__name__ for t in env.transform]
    return {"names": names, "rollout": env.rollout(4, det_policy(), break_when_any_done=False)}


@scenario("transforms/VecNorm/frozen")
def _(lib: Any) -> Any:
    transform = lib.envs.VecNorm(in_keys=["observation"], decay=0.9)
    env = lib.envs.TransformedEnv(count_env(lib, (2,), horizon=3), transform)
    env.rollout(4, det_policy(), break_when_any_done=False)
    out: dict[str, Any] = {"freeze": capture(transform.freeze)}
    out["rollout"] = capture(lambda: env.rollout(4, det_policy(), break_when_any_done=False))
    out["state"] = capture(lambda: _state(transform))
    return out


@scenario("transforms/NoopResetEnv/seeded")
def _(lib: Any) -> Any:
    """The seeded number of random steps after each reset (TorchRL: randint(noops))."""
    env = lib.envs.TransformedEnv(count_env(lib, (), horizon=50), lib.envs.NoopResetEnv(noops=6))
    return [capture(env.reset) for _ in range(6)]


@scenario("transforms/NoopResetEnv/done_during_noops")
def _(lib: Any) -> Any:
    """Episodes shorter than the count: reset, then play the count again (10 tries)."""
    short = lib.envs.TransformedEnv(
        count_env(lib, (), horizon=2), lib.envs.NoopResetEnv(noops=5, random=False)
    )
    fits = lib.envs.TransformedEnv(
        count_env(lib, (), horizon=4), lib.envs.NoopResetEnv(noops=3, random=False)
    )
    return {"short": capture(short.reset), "fits": capture(fits.reset)}
