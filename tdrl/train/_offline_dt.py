"""The ``dt`` offline preset: a Decision Transformer trained on context windows of a dataset
(TorchRL's ``sota-implementations/decision_transformer/dt.py``), evaluated in the dataset's
env with a target return."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule

from tdrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from tdrl.envs import EnvBase
from tdrl.envs.transforms import (
    CatFrames,
    Compose,
    ObservationNorm,
    Reward2GoTransform,
    RewardScaling,
    TargetReturn,
    TensorDictPrimer,
    TransformedEnv,
    UnsqueezeTransform,
)
from tdrl.modules import (
    DecisionTransformerInferenceWrapper,
    DTActor,
    ProbabilisticActor,
    TanhDelta,
)
from tdrl.objectives import DTLoss
from tdrl.train._builders import is_discrete
from tdrl.train._eval import evaluate
from tdrl.train._off_policy_agents import Agent
from tdrl.train._offline import OfflineTrainer
from tdrl.train._offline_data import OfflineData

__all__ = ["DTTrainer", "DTWindows", "make_dt_agent"]

# TorchRL's script's keys: the windows of the data and the env's CatFrames carry "_cat" names
OBS, ACTION, RTG = "observation_cat", "action_cat", "return_to_go_cat"


class DTWindows:
    """Context windows of a dataset for the Decision Transformer.

    The return-to-go of every step (undiscounted sum of the rewards to the episode's end,
    :class:`~tdrl.envs.transforms.Reward2GoTransform` with ``gamma=1``) is computed once
    on whole episodes, times ``reward_scale`` (TorchRL's ``reward_scaling``); observations
    are standardised with the dataset's mean and std (TorchRL's ``ObservationNorm``). A
    :class:`~tdrl.data.SliceSampler` over the ``episode`` ids then draws ``batch_size``
    windows of ``context`` consecutive steps of one episode (episodes shorter than
    ``context`` are never drawn). Without an ``episode`` entry, episodes end at
    ``("next", "done")``.

    :meth:`sample` gives ``[batch_size, context]`` batches of ``observation_cat``,
    ``action_cat`` and ``return_to_go_cat`` (``[..., 1]``), TorchRL's training keys.

    Args:
        data: the checked dataset (:class:`OfflineData`).
        context: the window length (TorchRL's ``stacked_frames``).
        batch_size: windows per batch.
        reward_scale: the factor of the returns-to-go.
        obs_norm: whether observations are standardised.
    """

    def __init__(
        self, data: OfflineData, context: int, batch_size: int, reward_scale: float, obs_norm: bool
    ) -> None:
        n = len(data)
        flat = data.buffer[0:n]
        obs = flat.get("observation").to(torch.float32)
        action = flat.get("action").to(torch.float32)
        reward = flat.get(("next", "reward")).to(torch.float32).reshape(n, 1)
        done = flat.get(("next", "done")).reshape(n).bool()
        if "episode" in flat.keys():
            episode = flat.get("episode").reshape(n).long()
        else:  # a new episode after every done step
            episode = torch.cat([torch.zeros(1, dtype=torch.long), done[:-1].long().cumsum(0)])
        ends = done.clone()
        ends[:-1] |= episode[1:] != episode[:-1]
        ends[-1] = True
        steps = TensorDict({"next": {"reward": reward[None], "done": ends[None, :, None]}}, [1, n])
        r2g = Reward2GoTransform(gamma=1.0, out_keys=["return_to_go"]).inv(steps)
        rtg = r2g.get("return_to_go")[0]
        starts = torch.ones(n, dtype=torch.bool)
        starts[1:] = ends[:-1]
        self.episode_returns = rtg[starts, 0]
        self.loc = obs.mean(0) if obs_norm else torch.zeros(obs.shape[1:])
        # the std of a constant feature is 0: floored (TorchRL would divide by 0)
        self.scale = obs.std(0).clamp_min(1e-6) if obs_norm else torch.ones(obs.shape[1:])
        self.context, self.batch_size = int(context), int(batch_size)
        long_enough = _lengths(episode) >= self.context
        if not bool(long_enough.any()):
            raise ValueError(
                f"tdrl train dt: the dataset {data.source} has no episode of at least "
                f"dt.context={self.context} steps (got episodes of at most "
                f"{int(_lengths(episode).max())}). Lower dt.context."
            )
        windows = TensorDict(
            {
                OBS: (obs - self.loc) / self.scale,
                ACTION: action,
                RTG: rtg * float(reward_scale),
                "episode": episode,
            },
            [n],
        )
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(n),
            sampler=SliceSampler(slice_len=self.context, traj_key="episode"),
            batch_size=self.batch_size * self.context,
        )
        self.buffer.extend(windows)

    def sample(self) -> TensorDictBase:
        """``[batch_size, context]`` windows of ``observation_cat``, ``action_cat`` and
        ``return_to_go_cat``."""
        batch = self.buffer.sample().reshape(self.batch_size, self.context)
        return batch.select(OBS, ACTION, RTG)


def _lengths(episode: torch.Tensor) -> torch.Tensor:
    return torch.unique_consecutive(episode, return_counts=True)[1]


def make_dt_agent(env: EnvBase, config: dict[str, Any]) -> Agent:
    """TorchRL's DT actor: ``DTActor`` -> ``TanhDelta`` over the action bounds in a
    ``ProbabilisticActor`` (deterministic), reading ``observation_cat``, ``action_cat``,
    ``return_to_go_cat`` and writing ``action``; ``DTLoss`` against ``action_cat``.
    ``policy`` is the inference wrapper (``dt.inference_context`` steps).

    Examples:
        >>> from tdrl.train import load_config
        >>> from tdrl.train._builders import make_env
        >>> cfg = load_config("dt", overrides=["transformer.n_embd=16", "transformer.n_inner=16"])
        >>> agent = make_dt_agent(make_env("Pendulum", 1, seed=0), cfg)
        >>> type(agent.loss).__name__, type(agent.policy).__name__
        ('DTLoss', 'DecisionTransformerInferenceWrapper')
    """
    if is_discrete(env.action_spec):
        raise ValueError(
            f"dt: the Decision Transformer preset needs continuous actions (got "
            f"{type(env.action_spec).__name__}; expected a bounded continuous spec, as "
            "TorchRL's TanhDelta head). Use iql, cql or bc for discrete actions."
        )
    from tdrl.train._offline_odt import is_online_dt, make_odt_agent

    if is_online_dt(config):  # the Online DT: OnlineDTActor, TanhNormal, OnlineDTLoss
        return make_odt_agent(env, config)
    spec = env.action_spec
    n_obs = int(env.observation_spec["observation"].shape[-1])
    n_act = int(spec.shape[-1])
    net = DTActor(n_obs, n_act, dict(config["transformer"]))
    module = TensorDictModule(net, in_keys=[OBS, ACTION, RTG], out_keys=["param"])
    n_batch = len(env.batch_size)
    actor = ProbabilisticActor(
        module,
        in_keys=["param"],
        out_keys=["action"],
        distribution_class=TanhDelta,
        distribution_kwargs={
            "low": spec.low[(0,) * n_batch],  # type: ignore[attr-defined]
            "high": spec.high[(0,) * n_batch],  # type: ignore[attr-defined]
        },
        spec=spec,
    )
    loss = DTLoss(actor, loss_function=str(config["loss"].get("loss_function", "l2")))
    loss.set_keys(action_target=ACTION)  # TorchRL's script: the data's actions are the target
    policy = DecisionTransformerInferenceWrapper(
        actor, inference_context=int(config["dt"]["inference_context"])
    )
    policy.set_tensor_keys(observation=OBS, action=ACTION, return_to_go=RTG)
    return Agent(loss, policy, policy, None)


class DTTrainer(OfflineTrainer):
    """``tdrl train dt --dataset minari:<id>``: the offline trainer (run directory, metrics by
    updates, checkpoints, ``--resume``) with context windows of the dataset
    (:class:`DTWindows`), TorchRL's linear learning-rate warm-up over
    ``optim.warmup_steps`` updates, and evaluation through the inference wrapper in the env
    with ``TargetReturn`` (``dt.eval_target_return``: a number, or ``"best"``, the best
    episode return of the dataset).

    Examples:
        >>> import tempfile
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from tdrl.envs import PendulumV1Env
        >>> from tdrl.train import load_config
        >>> env = PendulumV1Env(batch_size=(2,))
        >>> data = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = data.extend(env.rollout(50, break_when_any_done=False).reshape(-1))
        >>> cfg = load_config("dt", overrides=["env='Pendulum'", "updates=4",
        ...     "eval.every_updates=4", "eval.episodes=1", "eval.max_steps=5",
        ...     "transformer.n_embd=16", "transformer.n_inner=16", "buffer.batch_size=4"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     summary = DTTrainer(cfg, d, dataset=data, quiet=True).run()
        >>> summary["updates"]
        4
    """

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        dc = self.config["dt"]
        self.windows = DTWindows(
            self.data,
            int(dc["context"]),
            self.data.batch_size,
            float(dc["reward_scale"]),
            bool(dc.get("obs_norm", True)),
        )
        self.reward_scale = float(dc["reward_scale"])
        target = dc["eval_target_return"]
        if target == "best":
            target = float(self.windows.episode_returns.max())
        elif isinstance(target, str):
            raise ValueError(
                f"tdrl train dt: unknown dt.eval_target_return (got {target!r}; expected a "
                "number or 'best'). Pass dt.eval_target_return=<return>."
            )
        self.eval_target_return = float(target)
        self._base_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _batch(self, online: Any) -> TensorDictBase:
        return self.windows.sample()

    def _update_once(self, batch: TensorDictBase) -> dict[str, float]:
        warmup = int(self.config["optim"].get("warmup_steps", 0) or 0)
        factor = min((self._steps + 1) / warmup, 1.0) if warmup else 1.0  # TorchRL's LambdaLR
        for group, lr in zip(self.optimizer.param_groups, self._base_lr, strict=True):
            group["lr"] = lr * factor
        return super()._update_once(batch)

    def eval_env_for(self, env: EnvBase, target: float | None = None) -> TransformedEnv:
        """``env`` with TorchRL's evaluation transforms: rewards times ``dt.reward_scale``,
        the target return (``target``, default the eval target; scaled), the dataset's
        observation standardisation and the context windows (``CatFrames`` of
        ``dt.context`` steps)."""
        target = self.eval_target_return if target is None else target
        keys = ["observation", "action", "return_to_go_single"]
        return TransformedEnv(
            env,
            Compose(
                RewardScaling(0.0, self.reward_scale, in_keys=["reward"]),
                TargetReturn(
                    target * self.reward_scale,
                    mode=str(self.config["dt"].get("target_return_mode", "reduce")),
                    out_keys=["return_to_go_single"],
                ),
                TensorDictPrimer(action=env.action_spec.clone()),
                ObservationNorm(
                    self.windows.loc,
                    self.windows.scale,
                    in_keys=["observation"],
                    standard_normal=True,
                ),
                UnsqueezeTransform(-2, in_keys=keys, out_keys=[OBS, ACTION, RTG]),
                CatFrames(
                    N=self.windows.context, dim=-2, in_keys=[OBS, ACTION, RTG], padding="constant"
                ),
            ),
        )

    def episode_returns(self, env: EnvBase) -> list[float]:
        """One episode per member of ``env`` through the inference wrapper (returns in the
        env's own reward units)."""
        max_steps = int(self.config.get("eval", {}).get("max_steps", 10_000))
        self.policy.eval()  # no dropout
        try:
            scaled = evaluate(self.eval_env_for(env), self.policy, max_steps=max_steps)
        finally:
            self.policy.train()
        return [r / self.reward_scale for r in scaled]
