"""On-policy training (PPO, A2C): collect a batch, compute GAE, several epochs of minibatches."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.objectives import A2CLoss, ClipPPOLoss, PolicyGradientLoss
from tdrl.train._builders import make_actor_critic
from tdrl.train._compile import compile_loss
from tdrl.train._trainer import Trainer

__all__ = ["OnPolicyTrainer"]


class OnPolicyTrainer(Trainer):
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
        self.optimizers = {"optim": self.optimizer}
        compile_loss(loss, config)

    def _update(self, batch: TensorDictBase) -> dict[str, float]:
        lc, oc = self.config["loss"], self.config["optim"]
        with torch.no_grad():
            self.loss.value_estimator(batch)
        flat = batch.reshape(-1)
        n = flat.shape[0]
        mb = min(int(lc.get("minibatch_size", n)), n)
        max_norm = float(oc.get("max_grad_norm", 0) or 0)
        sums: dict[str, float] = {}
        count = 0
        for _ in range(int(lc.get("epochs", 1))):
            perm = torch.randperm(n)
            for start in range(0, n - mb + 1, mb):
                out = self.loss(flat[perm[start : start + mb]])
                total = sum(v for k, v in out.items() if k.startswith("loss_"))
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()  # type: ignore[union-attr]
                if max_norm:
                    torch.nn.utils.clip_grad_norm_(self.loss.parameters(), max_norm)
                self.optimizer.step()
                for k, v in out.items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
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
