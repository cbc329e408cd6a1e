"""GymEnv: builds a gymnasium env (or vector env) from its id and wraps it."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tdrl.envs.libs._gym_backend import set_gym_backend
from tdrl.envs.libs._gymnasium import GymWrapper, _check_frame_skip, import_gymnasium
from tdrl.specs import TensorSpec

__all__ = ["GymEnv"]


class GymEnv(GymWrapper):
    """Builds a gymnasium env from its id (``gymnasium.make``/``make_vec``) and wraps it.

    Args:
        env_name: a registered id, e.g. ``"CartPole-v1"``.
        num_envs: build a vector env of this many sub-envs (``batch_size=[num_envs]``);
            ``None`` or 0 builds a single env (``batch_size=[]``).
        vectorization_mode: ``"sync"`` (sub-envs in this process) or ``"async"`` (one worker
            process per sub-env).
        categorical_action_encoding: see :class:`GymWrapper`.
        disable_env_checker: skip gymnasium's env checker (default True, as TorchRL).
        from_pixels: also build the env with ``render_mode="rgb_array"`` and return the rendered
            frame as ``"pixels"`` (uint8 ``[H, W, 3]``), as TorchRL does.
        pixels_only: with ``from_pixels``, return only ``"pixels"`` (default True, TorchRL's
            ``GymEnv`` default); False keeps the state observation too.
        frame_skip: repeat each action this many times (``None``: 1). As in TorchRL, an env
            whose constructor takes ``frameskip`` (the Atari envs) gets
            ``frameskip=frame_skip`` (1 by default) and skips frames itself; for the others the
            wrapper repeats the action (see :class:`GymWrapper`).
        info_keys: see :class:`GymWrapper`.
        device: device of the data and specs.
        batch_size: only None or the env's own batch size (see :class:`GymWrapper`).
        allow_done_after_reset: see :class:`~tdrl.envs.core.EnvBase`.
        backend: TorchRL's per-env backend: only gymnasium (see :class:`set_gym_backend`).
        num_workers: only 1. TorchRL returns a ``ParallelEnv`` for more; tdrl's constructors
            never return another type: build ``ParallelEnv(n, lambda: GymEnv(...))``.
        **kwargs: passed to ``gymnasium.make`` (or to every sub-env of ``make_vec``), e.g.
            ``max_episode_steps``, ``render_mode`` or the env's own arguments.

    The vector env is built with ``autoreset_mode=Disabled``: tdrl resets done sub-envs itself.

    Examples:
        >>> env = GymEnv("CartPole-v1", num_envs=3)
        >>> _ = env.set_seed(0)
        >>> data = env.rollout(40, break_when_any_done=False)
        >>> data.batch_size, data["next", "reward"].dtype
        (torch.Size([3, 40]), torch.float32)
        >>> env.close()
        >>> GymEnv("Pendulum-v1", frame_skip=2).rollout(3).batch_size
        torch.Size([3])
    """

    def __init__(
        self,
        env_name: str,
        *,
        num_envs: int | None = None,
        vectorization_mode: str = "sync",
        categorical_action_encoding: bool = False,
        disable_env_checker: bool = True,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        info_keys: Sequence[str] | Mapping[str, TensorSpec] = (),
        device: torch.device | str | None = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        backend: Any = None,
        num_workers: int = 1,
        **kwargs: Any,
    ) -> None:
        if backend is not None:
            set_gym_backend(backend).set()
        if num_workers != 1:
            raise ValueError(
                f"GymEnv.__init__: num_workers is not supported (got {num_workers!r}; expected "
                "1). TorchRL returns a ParallelEnv then; build it yourself: "
                "ParallelEnv(num_workers, lambda: GymEnv(env_name, ...))."
            )
        gym = import_gymnasium()
        if isinstance(env_name, str) and env_name.startswith("ALE/"):
            _register_ale(gym, env_name)
        skip = _check_frame_skip("GymEnv", frame_skip)
        if from_pixels:
            kwargs.setdefault("render_mode", "rgb_array")
        kwargs["disable_env_checker"] = disable_env_checker
        native = _takes_frameskip(gym, env_name, kwargs)
        if native:
            kwargs["frameskip"] = skip
        if not num_envs:
            env = gym.make(env_name, **kwargs)
        else:
            env = _make_vector(gym, env_name, num_envs, vectorization_mode, kwargs)
        self.env_name = env_name
        super().__init__(
            env,
            categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=skip,
            info_keys=info_keys,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            batch_size=batch_size,
        )
        self.wrapper_frame_skip = 1 if native else skip

    def __repr__(self) -> str:
        return (
            f"GymEnv(env={self.env_name}, batch_size={tuple(self.batch_size)}, "
            f"device={self.device})"
        )


def _takes_frameskip(gym: Any, name: str, kwargs: dict[str, Any]) -> bool:
    """Whether the env skips frames itself: a ``frameskip`` given by the caller, registered
    with the id (the Atari envs) or in the signature of its entry point."""
    if "frameskip" in kwargs:
        raise ValueError(
            "GymEnv.__init__: pass frame_skip, not frameskip (got frameskip="
            f"{kwargs['frameskip']!r}; expected frame_skip=...). GymEnv hands it to envs that "
            "skip frames themselves, as TorchRL does."
        )
    try:
        spec = gym.spec(name)
    except Exception:  # unknown id: gymnasium.make raises its own error just after
        return False
    if "frameskip" in (spec.kwargs or {}):
        return True
    entry = spec.entry_point
    try:
        creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        return "frameskip" in inspect.signature(creator).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


def _register_ale(gym: Any, env_name: str) -> None:
    """Registers gymnasium's ``ALE/`` namespace (ale-py's games; idempotent)."""
    try:
        import ale_py
    except ImportError as err:
        raise ImportError(
            f"GymEnv.__init__: {env_name} is an Atari game, which needs ale-py (got {err!r}; "
            "expected ale_py importable). Install it: pip install 'tdrl[atari]'."
        ) from err
    gym.register_envs(ale_py)


def _make_vector(gym: Any, name: str, num_envs: int, mode: str, kwargs: dict[str, Any]) -> Any:
    if mode not in ("sync", "async"):
        raise ValueError(
            f"GymEnv.__init__: unknown vectorization_mode (got {mode!r}; expected 'sync' or "
            "'async'). Pick one of them."
        )
    autoreset = getattr(gym.vector, "AutoresetMode", None)
    if autoreset is None:
        raise RuntimeError(
            f"GymEnv.__init__: gymnasium {gym.__version__} has no vector autoreset modes "
            "(got no gymnasium.vector.AutoresetMode; expected gymnasium>=1.1). Upgrade gymnasium."
        )
    vector_kwargs = {"autoreset_mode": autoreset.DISABLED}
    return gym.make_vec(
        name,
        num_envs=num_envs,
        vectorization_mode=mode,
        vector_kwargs=vector_kwargs,
        **kwargs,
    )
