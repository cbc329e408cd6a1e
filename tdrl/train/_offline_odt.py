"""Online Decision Transformer: ``tdrl train dt --dataset ... --online-frames N`` (or
``dt.online = true``). Offline pretraining with ``OnlineDTLoss``, then online rounds: whole
episodes collected with the stochastic policy conditioned on a target return, stored with
their return-to-go, and windows drawn from the dataset and these episodes (the Online
Decision Transformer paper; TorchRL's ``online_dt.py`` is its pretraining part)."""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule

from tdrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from tdrl.envs import EnvBase
from tdrl.envs.transforms import Reward2GoTransform
from tdrl.modules import (
    DecisionTransformerInferenceWrapper,
    ExplorationType,
    OnlineDTActor,
    ProbabilisticActor,
    TanhNormal,
    set_exploration_type,
)
from tdrl.objectives import OnlineDTLoss
from tdrl.train._off_policy_agents import Agent
from tdrl.train._offline_dt import ACTION, OBS, RTG, DTTrainer
from tdrl.train._resume import load_env_state

__all__ = ["ODTTrainer", "collect_episodes", "is_online_dt", "make_odt_agent"]


def is_online_dt(config: dict[str, Any]) -> bool:
    """Whether a ``dt`` config trains the Online DT: ``dt.online = true`` or
    ``online_frames`` > 0."""
    return bool(config.get("dt", {}).get("online", False)) or bool(
        int(config.get("online_frames", 0) or 0)
    )


def make_odt_agent(env: EnvBase, config: dict[str, Any]) -> Agent:
    """TorchRL's online DT model: ``OnlineDTActor`` -> ``loc``/``scale`` -> ``TanhNormal``
    over the action bounds in a ``ProbabilisticActor``, reading ``observation_cat``,
    ``action_cat``, ``return_to_go_cat``; ``OnlineDTLoss`` (``odt.alpha_init``,
    ``odt.target_entropy``) against ``action_cat``. ``policy`` is the inference wrapper.

    Examples:
        >>> from tdrl.train import load_config
        >>> from tdrl.train._builders import make_env
        >>> cfg = load_config("dt", overrides=["dt.online=true", "transformer.n_embd=16",
        ...     "transformer.n_inner=16"])
        >>> agent = make_odt_agent(make_env("Pendulum", 1, seed=0), cfg)
        >>> type(agent.loss).__name__, float(agent.loss.target_entropy)
        ('OnlineDTLoss', -1.0)
    """
    spec = env.action_spec
    n_obs = int(env.observation_spec["observation"].shape[-1])
    net = OnlineDTActor(n_obs, int(spec.shape[-1]), dict(config["transformer"]))
    module = TensorDictModule(net, in_keys=[OBS, ACTION, RTG], out_keys=["loc", "scale"])
    n_batch = len(env.batch_size)
    actor = ProbabilisticActor(
        module,
        in_keys=["loc", "scale"],
        out_keys=["action"],
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": spec.low[(0,) * n_batch],  # type: ignore[attr-defined]
            "high": spec.high[(0,) * n_batch],  # type: ignore[attr-defined]
        },
        spec=spec[(0,) * n_batch] if n_batch else spec,
    )
    oc = config.get("odt", {})
    target = oc.get("target_entropy", "auto")
    loss = OnlineDTLoss(
        actor,
        alpha_init=float(oc.get("alpha_init", 0.1)),
        target_entropy=target if target == "auto" else float(target),
    )
    loss.set_keys(action_target=ACTION)  # the data's actions are the target
    policy = DecisionTransformerInferenceWrapper(
        actor, inference_context=int(config["dt"]["inference_context"])
    )
    policy.set_tensor_keys(observation=OBS, action=ACTION, return_to_go=RTG)
    return Agent(loss, policy, policy, None)


@torch.no_grad()
def collect_episodes(env: EnvBase, policy: Any, max_steps: int) -> list[TensorDictBase]:
    """One episode per member of ``env`` with the stochastic policy (``RANDOM`` exploration):
    each ``[T]`` with ``observation``, ``action``, ``("next", "reward")`` and
    ``("next", "done")`` (true at its last step, also where ``max_steps`` cut it). Steps after
    a member's first done are dropped.

    Examples:
        >>> from tdrl.envs import PendulumV1Env
        >>> env = PendulumV1Env(batch_size=(2,))
        >>> [len(e) for e in collect_episodes(env, env.rand_action, 7)]
        [7, 7]
    """
    td = env.reset()
    n = max(env.batch_size.numel(), 1)
    keys = ["observation", "action", ("next", "reward"), ("next", "done")]
    steps, lengths = [], torch.zeros(n, dtype=torch.long)
    alive = torch.ones(n, dtype=torch.bool)
    with set_exploration_type(ExplorationType.RANDOM):
        for _ in range(max_steps):
            td = env.step(policy(td))
            steps.append(td.select(*keys).reshape(n).clone())
            lengths += alive.long()
            alive &= ~td.get(("next", "done")).reshape(n, -1).any(-1)
            if not alive.any():
                break
            td = env.maybe_reset(env.step_mdp(td))
    stacked = cast(TensorDictBase, torch.stack(steps, 1))  # [n, T]
    out = []
    for i in range(n):
        episode = stacked[i, : int(lengths[i])].clone()
        done = torch.zeros(int(lengths[i]), 1, dtype=torch.bool)
        done[-1] = True
        episode.set(("next", "done"), done)
        out.append(episode)
    return out


def return_to_go(reward: torch.Tensor) -> torch.Tensor:
    """The undiscounted return-to-go ``[T, 1]`` of one whole episode's rewards ``[T, 1]``
    (:class:`~tdrl.envs.transforms.Reward2GoTransform` with ``gamma=1``)."""
    n = reward.shape[0]
    done = torch.zeros(1, n, 1, dtype=torch.bool)
    done[0, -1] = True
    steps = TensorDict({"next": {"reward": reward[None].float(), "done": done}}, [1, n])
    out = Reward2GoTransform(gamma=1.0, out_keys=["return_to_go"]).inv(steps)
    return out.get("return_to_go")[0]


class ODTTrainer(DTTrainer):
    """The Online Decision Transformer run: the ``dt`` preset's offline phase (windows of the
    dataset, lr warm-up, evaluation with ``dt.eval_target_return``) with the
    :func:`make_odt_agent` model, then, for ``online_frames`` env frames, online rounds:

    - every member of the training env plays one whole episode (at most
      ``online.max_steps`` steps) with the stochastic policy, conditioned on
      ``odt.collect_target_return`` (a number or ``"best"``) through the same transforms as
      the evaluation env (reward scaling, ``TargetReturn``, observation standardisation,
      context windows);
    - each episode is stored in a fresh replay buffer (checkpointed; ``online.capacity``
      steps) in the training layout: standardised ``observation_cat``, ``action_cat``,
      ``return_to_go_cat`` (its return-to-go in scaled units), ``("next", "reward")`` (scaled),
      ``("next", "done")`` and ``episode`` ids; episodes shorter than ``dt.context`` count
      as frames but are not stored (no window fits);
    - ``online.updates_per_episode`` updates per episode follow on batches of windows of
      which ``online.dataset_fraction`` come from the dataset and the rest from the stored
      episodes (the dataset alone until one is stored).

    Whole episodes are kept, so the last round may pass ``online_frames``. The transformer
    is trained by the ``optim`` Adam (warm-up, ``max_grad_norm`` on its parameters) on
    ``loss_log_likelihood + loss_entropy``, ``log_alpha`` by its own Adam (``odt.alpha_lr``,
    TorchRL's temperature optimiser) on ``loss_alpha``.
    """

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        loss, oc = self.agent.loss, self.config["optim"]
        self._actor_params = [p for n, p in loss.named_parameters() if n != "log_alpha"]
        self.optimizer = torch.optim.Adam(
            self._actor_params, lr=float(oc["lr"]), weight_decay=float(oc.get("weight_decay", 0))
        )
        self.alpha_optimizer = torch.optim.Adam(
            [loss.log_alpha], lr=float(self.config.get("odt", {}).get("alpha_lr", 1e-4))
        )
        self.optimizers = {"optim": self.optimizer, "alpha": self.alpha_optimizer}
        self._base_lr = [g["lr"] for g in self.optimizer.param_groups]
        self._episodes = 0  # ids of the stored online episodes
        self._collect_env: Any = None
        if self.online_frames:
            ctx, on = self.windows.context, self.config["online"]
            self.buffer = TensorDictReplayBuffer(
                storage=LazyTensorStorage(int(on["capacity"])),
                sampler=SliceSampler(slice_len=ctx, traj_key="episode"),
                batch_size=self.data.batch_size * ctx,
            )
            target = self.config.get("odt", {}).get("collect_target_return", "best")
            self.collect_target_return = self._target(target, "odt.collect_target_return")

    def _target(self, value: Any, name: str) -> float:
        if value == "best":
            return float(self.windows.episode_returns.max())
        if isinstance(value, str):
            raise ValueError(
                f"tdrl train dt: unknown {name} (got {value!r}; expected a number or 'best'). "
                f"Pass {name}=<return>."
            )
        return float(value)

    def _budget(self) -> int:
        on = self.config.get("online", {})
        episodes = -(-self.online_frames // int(on.get("max_steps", 1000) or 1000))
        return int(self.config["updates"]) + episodes * int(on.get("updates_per_episode", 300))

    # ------------------------------------------------------------------ online rounds
    def _fine_tune(self) -> None:
        on = self.config["online"]
        if self._collect_env is None:
            self._collect_env = self.eval_env_for(self.env, self.collect_target_return)
        while not self.done:
            self.policy.eval()  # no dropout while acting
            try:
                episodes = collect_episodes(self._collect_env, self.policy, int(on["max_steps"]))
            finally:
                self.policy.train()
            for episode in episodes:
                self._store(episode)
            frames = sum(len(e) for e in episodes)
            n = int(on.get("updates_per_episode", 300)) * len(episodes)
            returns = [float(e.get(("next", "reward")).sum()) / self.reward_scale for e in episodes]
            self._after_updates(self._updates(n, self.buffer), n, frames, returns)

    def _store(self, episode: TensorDictBase) -> None:
        """Writes one collected episode (the eval env's standardised observations and scaled
        rewards) with its return-to-go; episodes shorter than the context are skipped."""
        n = len(episode)
        if n < self.windows.context:
            return
        reward = episode.get(("next", "reward")).reshape(n, 1).float()
        row = TensorDict(
            {
                OBS: episode.get("observation").float(),
                ACTION: episode.get("action").float(),
                RTG: return_to_go(reward),
                "episode": torch.full((n,), self._episodes, dtype=torch.long),
                "next": {"reward": reward, "done": episode.get(("next", "done"))},
            },
            [n],
        )
        self.buffer.extend(row)
        self._episodes += 1

    def _batch(self, online: Any) -> TensorDictBase:
        ctx, size = self.windows.context, self.data.batch_size
        if online is None or len(online) == 0:
            return self.windows.sample()
        k = round(size * float(self.config["online"].get("dataset_fraction", 0.5)))
        parts = [self.windows.buffer.sample(k * ctx).select(OBS, ACTION, RTG)] if k else []
        if size - k:
            parts.append(online.sample((size - k) * ctx).select(OBS, ACTION, RTG))
        batch = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
        return batch.reshape(size, ctx)

    def _train_columns(self, batch: Any) -> dict[str, float]:
        """``train_return``: the mean of the last 20 collected episodes' returns."""
        self._recent = [*self._recent, *batch][-100:]
        last = self._recent[-20:]
        return {"train_return": sum(last) / len(last)} if last else {}

    # ------------------------------------------------------------------ updates
    def _update_once(self, batch: TensorDictBase) -> dict[str, float]:
        warmup = int(self.config["optim"].get("warmup_steps", 0) or 0)
        factor = min((self._steps + 1) / warmup, 1.0) if warmup else 1.0
        for group, lr in zip(self.optimizer.param_groups, self._base_lr, strict=True):
            group["lr"] = lr * factor
        out = self.agent.loss(batch)
        terms = ("loss_log_likelihood", "loss_entropy", "loss_alpha")
        self.optimizer.zero_grad(set_to_none=True)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        sum(out[k] for k in terms).backward()  # disjoint graphs: log_alpha only in loss_alpha
        max_norm = float(self.config["optim"].get("max_grad_norm", 0) or 0)
        if max_norm:
            torch.nn.utils.clip_grad_norm_(self._actor_params, max_norm)
        self.optimizer.step()
        self.alpha_optimizer.step()
        self._steps += 1
        return {k: float(out[k].detach()) for k in (*terms, "alpha", "entropy")}

    # ------------------------------------------------------------------ checkpoints
    def _state_tensors(self) -> dict[str, Any]:
        # the training env's generators, which each round's reset draws from (no root: every
        # round starts with a reset)
        return self._run_state().tensors(TensorDict())

    def _counters(self) -> dict[str, Any]:
        return {**super()._counters(), "episodes": self._episodes}

    def _read_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        values = super()._read_counters(counters)
        values["episodes"] = int(counters.get("episodes", 0))
        return values

    def _apply_counters(self, values: dict[str, Any]) -> None:
        super()._apply_counters(values)
        self._episodes = values["episodes"]
        if self._resume_state is not None:  # no collector to hand it to: loaded now
            load_env_state(self.env, self._resume_state[0])
            self._resume_state = None
