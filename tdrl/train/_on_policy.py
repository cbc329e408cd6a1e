"""On-policy training (PPO, A2C): collect a batch, compute GAE, several epochs of minibatches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.objectives import A2CLoss, ClipPPOLoss, PolicyGradientLoss
from tdrl.train._builders import make_actor_critic
from tdrl.train._compile import compile_loss
from tdrl.train._normalize import ObsNormalizer
from tdrl.train._trainer import Trainer

__all__ = ["OnPolicyTrainer", "PPOLoop"]


class PPOLoop(Trainer):
    """The loop of the on-policy trainers: collect a batch, compute its advantages, then
    ``loss.epochs`` epochs of minibatches of ``loss.minibatch_size`` transitions, each an
    optimizer step on the sum of the ``loss_*`` terms (gradients clipped to
    ``optim.max_grad_norm``); the learning rate anneals with ``optim.anneal_lr``.

    Subclasses set ``self.optimizer``, ``self.lr`` and ``self.policy`` and give the hooks
    :meth:`_advantages`, :meth:`_terms` and :meth:`_parameters`.
    """

    optimizer: torch.optim.Optimizer
    lr: float

    def _advantages(self, batch: TensorDictBase) -> TensorDictBase:
        """``batch`` (or a copy) holding the advantages and value targets."""
        raise NotImplementedError

    def _terms(self, sample: TensorDictBase) -> dict[str, torch.Tensor]:
        """The loss terms (``loss_*``, summed for the step) and diagnostics of a minibatch."""
        raise NotImplementedError

    def _parameters(self) -> Iterator[nn.Parameter]:
        """The parameters whose gradients are clipped."""
        raise NotImplementedError

    def _update(self, batch: TensorDictBase) -> dict[str, float]:
        lc, oc = self.config["loss"], self.config["optim"]
        flat = self._advantages(batch).reshape(-1)
        n = flat.shape[0]
        mb = min(int(lc.get("minibatch_size", n)), n)
        max_norm = float(oc.get("max_grad_norm", 0) or 0)
        sums: dict[str, float] = {}
        count = 0
        for _ in range(int(lc.get("epochs", 1))):
            perm = torch.randperm(n)
            for start in range(0, n - mb + 1, mb):
                terms = self._terms(flat[perm[start : start + mb]])
                # the loss_* terms add up; "<term>/<group>" entries only log a group's part
                total = sum(v for k, v in terms.items() if k.startswith("loss_") and "/" not in k)
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()  # type: ignore[union-attr]
                if max_norm:
                    nn.utils.clip_grad_norm_(self._parameters(), max_norm)
                self.optimizer.step()
                for k, v in terms.items():
                    # TorchRL's diagnostics may hold one value per agent or value feature
                    # (explained_variance, ESS): logged as their mean.
                    sums[k] = sums.get(k, 0.0) + float(v.detach().float().mean())
                count += 1
        return {k: v / max(count, 1) for k, v in sums.items()}

    def _anneal(self) -> None:
        if self.config["optim"].get("anneal_lr"):
            frac = max(0.0, 1.0 - self.frames / float(self.config["frames"]))
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr * max(frac, 0.05)

    def _train(self) -> None:
        fpb = int(self.config["collector"]["frames_per_batch"])
        collector = self._collector(self.policy, fpb)
        try:
            while not self.done:
                self._anneal()
                # rollout() returns the collector's memory (TorchRL's rollout): the update
                # rewrites the advantages and consumes the batch before the next one is collected
                batch = collector.rollout()
                losses = self._update(batch)
                self._after_iteration(batch, losses, fpb)
        finally:
            collector.shutdown()


class OnPolicyTrainer(PPOLoop):
    """PPO (clipped) or A2C on any env with a discrete or bounded continuous action.

    Examples:
        >>> import tempfile
        >>> from tdrl.train import load_config
        >>> cfg = load_config("ppo", overrides=["frames=512", "eval.every_frames=0"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     summary = OnPolicyTrainer(cfg, d, quiet=True).run()
        >>> summary["frames"]
        512
    """

    compiles = True

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        self.normalizer = ObsNormalizer.from_config(config)
        if self.normalizer is not None:
            self.env = self.normalizer.wrap_train(self.env)
        actor, critic = make_actor_critic(self.env, config.get("model", {}))
        lc = config["loss"]
        common: dict[str, Any] = dict(
            entropy_coeff=float(lc.get("entropy_coef", 0.0)),
            critic_coeff=float(lc.get("critic_coef", 0.5)),
            normalize_advantage=bool(lc.get("normalize_advantage", False)),
            loss_critic_type=str(lc.get("loss_critic_type", "smooth_l1")),
        )
        loss: PolicyGradientLoss
        if config["algorithm"] == "ppo":
            loss = ClipPPOLoss(
                actor, critic, clip_epsilon=float(lc.get("clip_epsilon", 0.2)), **common
            )
        else:
            loss = A2CLoss(actor, critic, **common)
        loss.make_value_estimator("GAE", gamma=float(lc["gamma"]), lmbda=float(lc["lmbda"]))
        self.loss = loss
        self.policy = actor
        oc = config["optim"]
        self.lr = float(oc["lr"])
        self.optimizer = torch.optim.Adam(loss.parameters(), lr=self.lr, eps=1e-5, fused=True)
        self.modules = {"loss": loss}
        if self.normalizer is not None:  # the statistics travel with the weights
            self.modules["obs_norm"] = self.normalizer.state
        self.optimizers = {"optim": self.optimizer}
        compile_loss(loss, config)

    def episode_returns(self, env: Any) -> list[float]:
        if self.normalizer is not None:  # the training statistics, frozen
            env = self.normalizer.wrap_eval(env)
        return super().episode_returns(env)

    def _checkpoint(self) -> None:
        if self.normalizer is not None:
            self.normalizer.save()
        super()._checkpoint()

    def _restore(self) -> dict[str, Any]:
        counters = super()._restore()
        if self.normalizer is not None:
            self.normalizer.load()
        return counters

    def _advantages(self, batch: TensorDictBase) -> TensorDictBase:
        with torch.no_grad():
            self.loss.value_estimator(batch)
        return batch

    def _terms(self, sample: TensorDictBase) -> dict[str, torch.Tensor]:
        return dict(self.loss(sample).items())

    def _parameters(self) -> Iterator[nn.Parameter]:
        return self.loss.parameters()
