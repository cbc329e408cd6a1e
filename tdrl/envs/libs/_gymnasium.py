"""GymWrapper: gymnasium envs (single or vectorised) as tdrl envs (GymEnv is in ``_gym_env``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core import EnvBase
from tdrl.envs.core._fast import lookup, truthy
from tdrl.envs.libs._gym_info import InfoReader
from tdrl.envs.libs._gym_pixels import PixelReader
from tdrl.envs.libs._gym_rows import GymRows
from tdrl.envs.libs._gym_spaces import make_codec
from tdrl.specs import Composite, TensorSpec, Unbounded

__all__ = ["GymWrapper", "import_gymnasium"]

_DONE_KEYS = ("done", "terminated", "truncated")


def import_gymnasium() -> Any:
    """Imports gymnasium, with an actionable error when it is missing."""
    try:
        import gymnasium
    except ImportError as err:  # pragma: no cover - gymnasium is a test dependency
        raise ImportError(
            "GymWrapper: gymnasium is not installed (got ImportError; expected gymnasium>=1.1). "
            "Install it with `pip install tdrl[gym]`."
        ) from err
    return gymnasium


def _check_frame_skip(owner: str, frame_skip: int | None) -> int:
    if frame_skip is None:
        return 1
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
        raise ValueError(
            f"{owner}.__init__: frame_skip must be an int >= 1 (got {frame_skip!r}). Pass the "
            "number of times each action is repeated, or None."
        )
    return frame_skip


def _autoreset_mode(env: Any) -> str:
    mode = getattr(env, "autoreset_mode", None) or env.metadata.get("autoreset_mode")
    return str(getattr(mode, "value", mode) or "NextStep")


class GymWrapper(EnvBase):
    """Wraps a gymnasium env, or a gymnasium vector env, as a tdrl env.

    Spaces become specs as in :func:`space_to_spec`, TorchRL's mapping (discrete spaces int64
    one-hot by default, ``Categorical`` with ``categorical_action_encoding=True``). A
    ``Dict`` observation space puts its keys at the root; any other space is stored under
    ``"observation"``. The action is ``"action"`` (a Composite for Dict/Tuple action spaces).
    ``"reward"`` is ``[*B, 1]`` float32; ``terminated``/``truncated`` come from gymnasium and
    ``done`` is their union. Observations keep the space's dtype (a float64 Box stays float64).

    A vector env (``gymnasium.vector.VectorEnv``) gives ``batch_size=[num_envs]``. Its
    sub-envs are never reset behind tdrl's back: a ``step`` returns the final observation of an
    episode, and the partial ``reset`` that follows (``step_and_maybe_reset``, collectors)
    resets exactly the done sub-envs, so no transition is lost or duplicated. Envs built with
    ``autoreset_mode`` ``Disabled`` (what :class:`GymEnv` builds) or ``NextStep`` are reset with
    gymnasium's ``reset_mask`` option; with ``SameStep`` the final observation is read from
    ``info["final_obs"]`` and the already-reset observation is kept for the next ``reset``.

    Args:
        env: a ``gymnasium.Env`` or ``gymnasium.vector.VectorEnv``.
        categorical_action_encoding: discrete spaces as indices instead of one-hot vectors.
        from_pixels: return the frame of ``env.render()`` (the env must have
            ``render_mode="rgb_array"``) as ``"pixels"`` (uint8 ``[H, W, 3]``, an ``Unbounded``
            spec). Single envs only.
        pixels_only: with ``from_pixels``, drop the state observation (default False, TorchRL's
            ``GymWrapper`` default).
        frame_skip: repeat each action this many times (``None``: 1), as TorchRL: the
            observation, done flags and info are those of the last step, the reward is the sum
            over the steps, and the repetition stops early when an episode ends (any sub-env of
            a vector env).
        batch_size: only None or the env's own batch size.
        spec_locked: accepted as :class:`~tdrl.envs.EnvBase` does (tdrl never locks specs).
        info_keys: info entries to copy into the data (next to the observations, in the
            observation spec): a list of keys whose specs are inferred from the info of a first
            reset, or a mapping from key to the spec of one (unbatched) env for keys that only
            appear in step infos. Missing entries are written as zeros.
        device: device of the data and specs.
        allow_done_after_reset: see :class:`~tdrl.envs.core.EnvBase`.

    An ``"action_mask"`` found in the reset info is always copied (as bool) and added to the
    observation spec. ``set_seed(s)`` resets the gymnasium env with ``seed=s`` at once, as
    TorchRL does (sub-env ``i`` of a vector env gets ``s + i``, gymnasium's convention), and
    seeds the action space; the next ``reset`` continues from the seeded generator. It returns
    the next seed of the chain as :meth:`EnvBase.set_seed` does.

    Public attributes the wrapper lacks are read from the gymnasium env (TorchRL), e.g.
    ``env.spec.max_episode_steps`` or ``env.unwrapped``.

    Examples:
        >>> import gymnasium as gym
        >>> env = GymWrapper(gym.make("CartPole-v1"))
        >>> _ = env.set_seed(0)
        >>> env.rollout(3)["next", "observation"].shape
        torch.Size([3, 4])
        >>> env.action_spec
        OneHot(shape=torch.Size([2]), n=2, dtype=torch.int64, device=cpu)
    """

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        info_keys: Sequence[str] | Mapping[str, TensorSpec] = (),
        device: torch.device | str | None = None,
        allow_done_after_reset: bool = False,
        batch_size: Sequence[int] | torch.Size | None = None,
        spec_locked: bool = True,
    ) -> None:
        if env is None:
            raise TypeError(
                f"{type(self).__name__}.__init__: no env to wrap (got env=None; expected a "
                "gymnasium.Env or VectorEnv). Pass GymWrapper(gymnasium.make(...))."
            )
        self.frame_skip = _check_frame_skip(type(self).__name__, frame_skip)
        # the repetitions done here (GymEnv sets 1 when the gymnasium env skips frames itself)
        self.wrapper_frame_skip = self.frame_skip
        gym = import_gymnasium()
        self.is_vector = isinstance(env, gym.vector.VectorEnv)
        batch = (int(env.num_envs),) if self.is_vector else ()
        if batch_size is not None and tuple(batch_size) != batch:
            raise ValueError(
                f"{type(self).__name__}.__init__: batch_size differs from the env's (got "
                f"{tuple(batch_size)}; expected {batch}: num_envs of a vector env, () else). "
                "Drop batch_size."
            )
        super().__init__(
            batch_size=batch,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            spec_locked=spec_locked,
        )
        self.env = env
        self.categorical_action_encoding = categorical_action_encoding
        self._same_step = self.is_vector and _autoreset_mode(env) == "SameStep"
        obs_space = env.single_observation_space if self.is_vector else env.observation_space
        act_space = env.single_action_space if self.is_vector else env.action_space
        b, dev, cat = self.batch_size, self.device, categorical_action_encoding
        self._obs_codec = make_codec(obs_space, b, dev, cat)
        self._final_codec = make_codec(obs_space, (), dev, cat) if self.is_vector else None
        self._act_codec = make_codec(act_space, b, dev, cat)
        self._obs_is_dict = isinstance(obs_space, gym.spaces.Dict)
        obs_spec = self._obs_codec.spec
        reserved = [*_DONE_KEYS, "reward"]
        reserved += list(obs_spec.keys()) if self._obs_is_dict else ["observation"]  # type: ignore[attr-defined]
        # One reset tells which info entries exist (and their shapes and dtypes).
        _, info = env.reset()
        self._cached = np.zeros(batch or (1,), dtype=bool)
        self.from_pixels, self.pixels_only = bool(from_pixels), bool(pixels_only)
        self._pixels: PixelReader | None = None
        if from_pixels:
            if self.is_vector:
                raise ValueError(
                    f"{type(self).__name__}.__init__: from_pixels is not supported on vector "
                    "envs (got a VectorEnv; expected a single gymnasium.Env). Batch single "
                    "pixel envs with SerialEnv/ParallelEnv."
                )
            self._pixels = PixelReader(env, type(self).__name__, dev)
            reserved.append("pixels")
        self._info = InfoReader(info, info_keys, b, dev, reserved)
        self._set_specs()
        self._cache: TensorDictBase | None = None
        self._to_device = dev is not None and dev.type != "cpu"
        # the common case _step converts inline: what _observation/_flags/_finish would do
        self._simple = not (
            self.is_vector
            or self._pixels is not None
            or self._info.specs
            or self._obs_is_dict
            or self._to_device
        )

    def _set_specs(self) -> None:
        b, dev = self.batch_size, self.device
        obs_spec = self._obs_codec.spec
        if isinstance(obs_spec, Composite) and self._obs_is_dict:
            obs = obs_spec.clone()
        else:
            obs = Composite(observation=obs_spec, shape=b, device=dev)
        if self._pixels is not None:
            if self.pixels_only:
                obs = Composite(shape=b, device=dev)
            obs["pixels"] = self._pixels.spec
        for key, spec in self._info.specs.items():
            obs[key] = spec
        self.full_observation_spec = obs
        self.full_action_spec = Composite(action=self._act_codec.spec, shape=b, device=dev)
        self.full_reward_spec = Composite(
            reward=Unbounded(shape=(*b, 1), device=dev), shape=b, device=dev
        )
        self.full_done_spec = self.default_done_spec()

    # ------------------------------------------------------------------ conversion
    def _observation(self, obs: Any, info: Mapping[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self._pixels is not None:
            data["pixels"] = self._pixels.read()
        if not (self._pixels is not None and self.pixels_only):
            value = self._obs_codec.decode(obs)
            data.update(dict(value.items()) if self._obs_is_dict else {"observation": value})
        self._info.read(info, data)
        return data

    def _finish(self, data: dict[str, Any]) -> TensorDictBase:
        out = TensorDict._new_unsafe(data, batch_size=self.batch_size, nested=False)
        return out.to(self.device) if self._to_device else out

    def _flags(self, terminated: Any, truncated: Any) -> tuple[torch.Tensor, ...]:
        # Built through numpy: torch.tensor on python scalars costs several times more.
        if self.is_vector:
            term = torch.from_numpy(np.array(terminated, dtype=bool)).unsqueeze(-1)
            trunc = torch.from_numpy(np.array(truncated, dtype=bool)).unsqueeze(-1)
            return term | trunc, term, trunc
        term_b, trunc_b = bool(terminated), bool(truncated)
        return (
            torch.from_numpy(np.array([term_b or trunc_b])),
            torch.from_numpy(np.array([term_b])),
            torch.from_numpy(np.array([trunc_b])),
        )

    def _reset_output(self, obs: Any, info: Mapping[str, Any]) -> dict[str, Any]:
        data = self._observation(obs, info)
        shape = (*self.batch_size, 1)
        for key in _DONE_KEYS:
            data[key] = torch.zeros(shape, dtype=torch.bool)
        return data

    # ------------------------------------------------------------------ hooks
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = None if tensordict is None else lookup(tensordict, ("_reset",))
        if mask is None:
            self._cached[:] = False
            obs, info = self.env.reset()
            return self._finish(self._reset_output(obs, info))
        wanted = None if not self.is_vector else mask.reshape(-1).cpu().numpy()
        if not (truthy(mask) if wanted is None else wanted.any()):
            # Nothing to reset: the base class keeps every old value.
            return self._finish(self._reset_output_zeros())
        if wanted is None:
            obs, info = self.env.reset()
            return self._finish(self._reset_output(obs, info))
        return self._finish(self._partial_vector_reset(wanted))

    def _reset_output_zeros(self) -> dict[str, Any]:
        zero = self.full_observation_spec.zero().cpu()
        data = dict(zero.items())
        for key in _DONE_KEYS:
            data[key] = torch.zeros((*self.batch_size, 1), dtype=torch.bool)
        return data

    def _partial_vector_reset(self, wanted: np.ndarray) -> dict[str, Any]:
        from_cache = wanted & self._cached
        fresh = wanted & ~self._cached
        if fresh.any():
            options = {"reset_mask": fresh}
            obs, info = self.env.reset(options=options)
            data = self._reset_output(obs, info)
        else:
            data = self._reset_output_zeros()
        if from_cache.any() and self._cache is not None:
            rows = torch.as_tensor(np.flatnonzero(from_cache))
            out = TensorDict._new_unsafe(data, batch_size=self.batch_size)
            out[rows] = self._cache[rows]
            data = dict(out.items())
        self._cached &= ~wanted
        return data

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        value = tensordict._tensordict.get("action") if type(tensordict) is TensorDict else None
        action = self._act_codec.encode(tensordict.get("action") if value is None else value)
        if self.wrapper_frame_skip == 1:
            obs, reward, terminated, truncated, info = self.env.step(action)
        else:
            obs, reward, terminated, truncated, info = self._repeat(action)
        if self._simple:  # one env, one observation array: the conversions inline
            term, trunc = bool(terminated), bool(truncated)
            data = {
                "observation": self._obs_codec.decode(obs),
                "reward": torch.from_numpy(np.array([reward], dtype=np.float32)),
                "done": torch.from_numpy(np.array([term or trunc])),
                "terminated": torch.from_numpy(np.array([term])),
                "truncated": torch.from_numpy(np.array([trunc])),
            }
            return TensorDict._new_unsafe(data, batch_size=self.batch_size, nested=False)
        data = self._observation(obs, info)
        if self.is_vector:
            data["reward"] = torch.from_numpy(np.asarray(reward, dtype=np.float32)).unsqueeze(-1)
        else:
            data["reward"] = torch.from_numpy(np.array([reward], dtype=np.float32))
        data["done"], data["terminated"], data["truncated"] = self._flags(terminated, truncated)
        if self._same_step and "final_obs" in info:
            self._swap_final(data, info)
        return self._finish(data)

    def _repeat(self, action: Any) -> tuple[Any, Any, Any, Any, Any]:
        """TorchRL's frame skip: the action ``wrapper_frame_skip`` times, rewards summed, the
        last observation, flags and info; stops when an episode ends (any sub-env)."""
        total: Any = 0.0
        for _ in range(self.wrapper_frame_skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total = total + np.asarray(reward, dtype=np.float64)
            if np.any(terminated) or np.any(truncated):
                break
        return obs, total if self.is_vector else float(total), terminated, truncated, info

    def _swap_final(self, data: dict[str, Any], info: Mapping[str, Any]) -> None:
        """SameStep mode: keep the reset observation of done sub-envs, return their final one."""
        done = np.asarray(info["_final_obs"], dtype=bool)
        out = TensorDict._new_unsafe(data, batch_size=self.batch_size)
        obs_keys = self.observation_keys
        step_obs = out.select(*obs_keys).clone()
        self._cache = step_obs if self._cache is None else self._cache
        final_info = info.get("final_info", {})
        for i in np.flatnonzero(done):
            self._cache[int(i)] = step_obs[int(i)]
            final = self._final_codec.decode(info["final_obs"][i])  # type: ignore[union-attr]
            row = dict(final.items()) if self._obs_is_dict else {"observation": final}
            self._info.read_row(final_info, int(i), row)
            for key, value in row.items():
                out.get(key)[int(i)] = value
        self._cached |= done

    def _row_writer(self, nxt: TensorDictBase, root: TensorDictBase) -> GymRows | None:
        """Single envs with a Box observation step straight into rows (see
        ``EnvBase._row_writer`` and ``GymRows``)."""
        return GymRows.build(self, nxt, root)

    def _rows_possible(self) -> bool:
        return GymRows.possible(self)

    def _set_seed(self, seed: int | None) -> None:
        # TorchRL resets the gymnasium env with the seed right away (the data of that reset is
        # dropped): the next reset continues from the seeded generator.
        self._cached[:] = False
        self.env.reset(seed=seed)
        self.env.action_space.seed(seed)

    def _close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        """Public attributes the wrapper lacks come from the gymnasium env (TorchRL).

        Examples:
            >>> import gymnasium as gym
            >>> GymWrapper(gym.make("Pendulum-v1")).spec.max_episode_steps
            200
        """
        env = self.__dict__.get("env")
        if name.startswith("_") or env is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            return getattr(env, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}, nor has the "
                f"gymnasium env it wraps ({type(env).__name__})"
            ) from None
