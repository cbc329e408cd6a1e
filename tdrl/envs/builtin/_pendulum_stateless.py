"""PendulumEnv: TorchRL's stateless pendulum, whose state and physics travel in the data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core import EnvBase
from tdrl.specs import Bounded, Composite, Unbounded, make_composite_from_td

__all__ = ["PendulumEnv"]

_PARAM_DEFAULTS = {"max_speed": 8.0, "max_torque": 2.0, "dt": 0.05, "m": 1.0, "l": 1.0}


class PendulumEnv(EnvBase):
    """The stateless pendulum of TorchRL's "Pendulum: writing your own env" tutorial.

    Nothing lives in the env but its specs and a random generator: the angle ``"th"``
    (0 = upright), the angular velocity ``"thdot"`` and the physical constants under
    ``"params"`` (``max_speed``, ``max_torque``, ``dt``, ``g``, ``m``, ``l``) are read from the
    input of every step and written to its output. The env is not batch-locked: its batch size
    is ``()`` and the data's batch decides how many pendulums run, e.g.
    ``env.reset(env.gen_params(batch_size=[10]))`` starts ten of them.

    One step clips the torque ``u`` to ``max_torque``, pays
    ``angle_normalize(th)**2 + 0.1 * thdot**2 + 0.001 * u**2`` (the reward is its negative,
    ``[*B, 1]``), sets ``thdot' = clip(thdot + (3 g / (2 l) sin(th) + 3 u / (m l**2)) dt,
    max_speed)`` and ``th' = angle_normalize(th + thdot' dt)``. It never ends (``done`` and
    ``terminated`` are false); bound it with ``rollout(max_steps)`` or a ``StepCounter``.

    A reset draws ``th`` in ``[-pi, pi)`` and ``thdot`` in ``[-1, 1)`` with the batch of the
    input, keeping the input's ``"params"``; without them it uses ``gen_params()`` (as in
    TorchRL, ``td_params`` only shapes the specs: pass parameters to ``reset`` to change the
    physics).

    This is not :class:`PendulumV1Env`, tdrl's batched, stateful ``Pendulum-v1`` with a
    ``(cos th, sin th, thdot)`` observation.

    Args:
        td_params: parameters as made by :meth:`gen_params`, for the specs (the action bounds
            come from ``max_torque``, those of ``thdot`` from ``max_speed``). ``None``:
            ``gen_params()``.
        seed: seed of the env's generator (``None``: drawn from the global torch RNG).
        device: where the data and specs live.

    Examples:
        >>> env = PendulumEnv(seed=0)
        >>> td = env.reset(env.gen_params(batch_size=[10]))
        >>> td["th"].shape
        torch.Size([10])
        >>> out = env.rollout(5, auto_reset=False, tensordict=td)
        >>> out.batch_size, out["next", "reward"].shape
        (torch.Size([10, 5]), torch.Size([10, 5, 1]))
    """

    DEFAULT_X: ClassVar[float] = math.pi
    DEFAULT_Y: ClassVar[float] = 1.0
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["human", "rgb_array"], "render_fps": 30}
    batch_locked = False
    rng: torch.Generator | None = None

    def __init__(
        self,
        td_params: TensorDictBase | None = None,
        seed: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(device=device)
        if td_params is None:
            td_params = self.gen_params(device=self.device)
        if "params" not in td_params.keys():
            raise KeyError(
                f"PendulumEnv: td_params has no 'params' entry (got keys "
                f"{sorted(map(str, td_params.keys()))}; expected the output of "
                "PendulumEnv.gen_params()). Pass e.g. PendulumEnv.gen_params(g=9.81)."
            )
        self._make_spec(td_params)
        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        self.set_seed(seed)

    @staticmethod
    def gen_params(
        g: float = 10.0,
        batch_size: Sequence[int] | torch.Size | None = None,
        device: torch.device | str | None = None,
    ) -> TensorDictBase:
        """The physical parameters under ``"params"``, expanded to ``batch_size``.

        Args:
            g: gravity.
            batch_size: leading dims of the parameters (``None``: unbatched).
            device: where they live.

        Returns:
            A TensorDict with ``"params"``: float32 ``max_speed=8``, ``max_torque=2``,
            ``dt=0.05``, ``g``, ``m=1`` and ``l=1``.

        Examples:
            >>> td = PendulumEnv.gen_params(g=9.81, batch_size=[3])
            >>> td.batch_size, td["params", "g"].tolist()
            (torch.Size([3]), [9.8100004196167, 9.8100004196167, 9.8100004196167])
        """
        values = {**_PARAM_DEFAULTS, "g": g}
        params = TensorDict(
            {k: torch.tensor(v, dtype=torch.float32) for k, v in values.items()}, batch_size=[]
        )
        td = TensorDict({"params": params}, batch_size=[], device=device)
        if batch_size:
            td = td.expand(*batch_size).contiguous()
        return td

    @staticmethod
    def angle_normalize(x: torch.Tensor) -> torch.Tensor:
        """``x`` wrapped into ``[-pi, pi)``.

        Examples:
            >>> round(PendulumEnv.angle_normalize(torch.tensor(4.0)).item(), 4)
            -2.2832
        """
        return torch.remainder(x + math.pi, 2 * math.pi) - math.pi

    def _make_spec(self, td_params: TensorDictBase) -> None:
        max_speed = td_params.get(("params", "max_speed"))
        max_torque = td_params.get(("params", "max_torque"))
        self.observation_spec = Composite(
            th=Bounded(-math.pi, math.pi, shape=(), dtype=torch.float32, device=self.device),
            thdot=Bounded(-max_speed, max_speed, shape=(), dtype=torch.float32, device=self.device),
            params=make_composite_from_td(td_params.get("params"), unsqueeze_null_shapes=False),
            shape=(),
        )
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Bounded(
            -max_torque, max_torque, shape=(1,), dtype=torch.float32, device=self.device
        )
        self.reward_spec = Unbounded(shape=(*td_params.shape, 1), device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        rng = torch.Generator(device=self.device or "cpu")
        if seed is None:
            rng.seed()
        else:
            rng.manual_seed(seed)
        self.rng = rng

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        if tensordict is None or "params" not in tensordict.keys():
            shape = self.batch_size if tensordict is None else tensordict.batch_size
            tensordict = self.gen_params(batch_size=shape, device=self.device)
        shape = tensordict.batch_size
        dev = self.device
        th = torch.rand(shape, generator=self.rng, device=dev) * (2 * self.DEFAULT_X)
        thdot = torch.rand(shape, generator=self.rng, device=dev) * (2 * self.DEFAULT_Y)
        return TensorDict(
            {
                "th": th - self.DEFAULT_X,
                "thdot": thdot - self.DEFAULT_Y,
                "params": tensordict.get("params"),
            },
            batch_size=shape,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        th, thdot = tensordict.get("th"), tensordict.get("thdot")
        params = tensordict.get("params")
        g, m, length, dt = (params.get(k) for k in ("g", "m", "l", "dt"))
        max_torque, max_speed = params.get("max_torque"), params.get("max_speed")
        u = tensordict.get("action").squeeze(-1)
        u = torch.maximum(torch.minimum(u, max_torque), -max_torque)
        cost = self.angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
        accel = 3.0 * g / (2.0 * length) * th.sin() + 3.0 / (m * length.square()) * u
        new_thdot = thdot + accel * dt
        new_thdot = torch.maximum(torch.minimum(new_thdot, max_speed), -max_speed)
        new_th = self.angle_normalize(th + new_thdot * dt)
        reward = -cost.reshape(*tensordict.batch_size, 1)
        return TensorDict(
            {
                "th": new_th,
                "thdot": new_thdot,
                "params": params,
                "reward": reward,
                "done": torch.zeros_like(reward, dtype=torch.bool),
            },
            batch_size=tensordict.batch_size,
        )
