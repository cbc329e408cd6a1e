"""Plain-PyTorch off-policy updates: the baselines of ``test_losses_offpolicy.py``.

Not a test module: the hand-written versions of the tdrl losses' maths, as a careful PyTorch
engineer writes them. Critic ensembles are vectorised (the members' weights stacked, one
``baddbmm`` per layer, :class:`Stacked`), target networks are detached copies, and each
update computes what the tdrl loss returns: the loss terms and the per-sample TD error a
prioritized buffer needs. Every network is built from the tdrl loss's own weights
(:func:`plain_of`), so both sides run the same networks.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import Tensor, nn

from tdrl.modules import MLP

# TorchRL's biased softplus scale (NormalParamExtractor's default): softplus(raw + SHIFT) +
# 0.01, which is 1 at raw = 0
SHIFT = math.log(math.expm1(0.99))
Losses = Callable[[], Tensor]
# (the modules to optimise, the summed loss, where the loss puts its per-sample TD error)
Update = tuple[list[nn.Module], Losses, dict[str, Tensor]]


class Stacked(nn.Module):
    """``N`` MLPs of one shape as stacked weights: ``[N, *batch, out]`` from one call.

    Built from the stacked parameters of a tdrl ``QEnsemble`` (``weight`` ``[N, out, in]``):
    each linear layer is one ``baddbmm``, ReLU between layers.
    """

    def __init__(self, params: TensorDict) -> None:
        super().__init__()
        leaves = list(params.items(True, True))
        self.weights = nn.ParameterList(  # [N, in, out]
            nn.Parameter(w.detach().transpose(-1, -2).contiguous())
            for key, w in leaves
            if key[-1] == "weight"
        )
        self.biases = nn.ParameterList(  # [N, 1, out]
            nn.Parameter(b.detach().unsqueeze(-2).clone()) for key, b in leaves if key[-1] == "bias"
        )

    def forward(self, x: Tensor, detach: bool = False, members: Tensor | None = None) -> Tensor:
        """Every member (or those at ``members``) on ``x`` ``[*batch, in]``: ``[N, *batch, out]``."""
        n = self.weights[0].shape[0] if members is None else members.numel()
        batch = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1]).expand(n, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            if members is not None:
                w, b = w[members], b[members]
            if detach:
                w, b = w.detach(), b.detach()
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = torch.relu_(x)
        return x.reshape(n, *batch, x.shape[-1])


def plain_of(module: nn.Module) -> nn.Module:
    """A plain copy of a tensordict module's inner network (its ``.module``), same weights."""
    return copy.deepcopy(getattr(module, "module", module))


def policy_mlp(actor: nn.Module) -> nn.Module:
    """A plain copy of the MLP inside a tdrl ``ProbabilisticActor`` (its raw outputs)."""
    return copy.deepcopy(next(m for m in actor.modules() if isinstance(m, MLP)))


def frozen_copy(module: nn.Module) -> nn.Module:
    twin = copy.deepcopy(module)
    twin.requires_grad_(False)
    return twin


def stacked_pair(ensemble: nn.Module) -> tuple[Stacked, Stacked]:
    """The live and target :class:`Stacked` critics of a tdrl ``QEnsemble``."""
    live = Stacked(ensemble.params)
    return live, frozen_copy(live)


def entropy_regularized(
    loss: nn.Module,
) -> tuple[nn.Module, Stacked, Stacked, nn.Parameter, nn.ParameterList]:
    """The policy MLP, live and target critics and temperature of a SAC-like tdrl loss."""
    critics, targets = stacked_pair(loss.qvalue_network)
    log_alpha = nn.Parameter(torch.zeros(()))
    return (
        policy_mlp(loss.actor_network),
        critics,
        targets,
        log_alpha,
        nn.ParameterList([log_alpha]),
    )


def bootstrap(b: TensorDict, gamma: float) -> Callable[[Tensor], Tensor]:
    """``next_value -> r + gamma * V' * (1 - terminated)`` on the batch's tensors."""
    reward, live = b["next", "reward"], ~b["next", "terminated"]
    return lambda next_value: reward + gamma * next_value * live


def tanh_normal(out: Tensor, shape: tuple[int, ...] = ()) -> tuple[Tensor, Tensor]:
    """Reparameterised TanhNormal draw on [-1, 1] and its log-probability (last dim summed)."""
    loc, raw = out.chunk(2, -1)
    scale = (F.softplus(raw + SHIFT) + 0.01).clamp_min(1e-4)
    loc, scale = loc.expand(*shape, *loc.shape), scale.expand(*shape, *scale.shape)
    x = loc + scale * torch.randn_like(loc)
    log_prob = -0.5 * ((x - loc) / scale).pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
    log_det = 2 * (math.log(2) - x - F.softplus(-2 * x))
    return torch.tanh(x), (log_prob - log_det).sum(-1, keepdim=True)


def tanh_normal_log_prob(out: Tensor, action: Tensor) -> Tensor:
    loc, raw = out.chunk(2, -1)
    scale = (F.softplus(raw + SHIFT) + 0.01).clamp_min(1e-4)
    eps = torch.finfo(action.dtype).eps
    x = torch.atanh(action.clamp(-1 + eps, 1 - eps))
    log_prob = -0.5 * ((x - loc) / scale).pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
    log_det = 2 * (math.log(2) - x - F.softplus(-2 * x))
    return (log_prob - log_det).sum(-1, keepdim=True)


def members_loss(q: Tensor, y: Tensor, reduce: str = "sum") -> tuple[Tensor, Tensor]:
    """Smooth-L1 regression of every member on ``y``, and the largest squared error per sample."""
    err = F.smooth_l1_loss(q, y.expand_as(q), reduction="none").flatten(1).mean(1)
    td_error = (q.detach() - y).square().amax(0).squeeze(-1)
    return (err.sum() if reduce == "sum" else err.mean()), td_error


# ----------------------------------------------------------------- the updates
def dqn(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    net = plain_of(loss.value_network)
    target = frozen_copy(net)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"].unsqueeze(-1)

    def losses() -> Tensor:
        q = net(obs).gather(-1, action)
        with torch.no_grad():
            y = y_of(target(nobs).max(-1, keepdim=True).values)
        errors["td_error"] = (q.detach() - y).square()
        return (q - y).square().mean()

    return [net], losses, errors


def ddpg(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor, critic = plain_of(loss.actor_network), plain_of(loss.value_network)
    target_actor, target_critic = frozen_copy(actor), frozen_copy(critic)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    frozen = [p for p in critic.parameters()]

    def losses() -> Tensor:
        q = critic(torch.cat([obs, action], -1))
        with torch.no_grad():
            y = y_of(target_critic(torch.cat([nobs, target_actor(nobs)], -1)))
        for p in frozen:
            p.requires_grad_(False)
        actor_loss = -critic(torch.cat([obs, actor(obs)], -1)).mean()
        for p in frozen:
            p.requires_grad_(True)
        errors["td_error"] = (q.detach() - y).square()
        return actor_loss + (q - y).square().mean()

    return [actor, critic], losses, errors


def td3(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor = plain_of(loss.actor_network)
    target_actor = frozen_copy(actor)
    critics, targets = stacked_pair(loss.qvalue_network)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]

    def losses() -> Tensor:
        with torch.no_grad():
            next_action = target_actor(nobs)
            noise = (torch.randn_like(next_action) * 0.2).clamp(-0.5, 0.5)
            nsa = torch.cat([nobs, (next_action + noise).clamp(-1.0, 1.0)], -1)
            y = y_of(targets(nsa).amin(0))
        q_actor = critics(torch.cat([obs, actor(obs)], -1), detach=True)
        q = critics(torch.cat([obs, action], -1))
        q_loss, errors["td_error"] = members_loss(q, y)
        return -q_actor[0].mean() + q_loss

    return [actor, critics], losses, errors


def soft(loss: nn.Module, b: TensorDict, gamma: float, subset: int | None) -> Update:
    """SAC (``subset=None``: every critic, min) and REDQ (a random subset; mean for the actor)."""
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor, critics, targets, log_alpha, holder = entropy_regularized(loss)
    n = critics.weights[0].shape[0]
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    act_dim = action.shape[-1]

    def losses() -> Tensor:
        alpha = log_alpha.detach().exp()
        members = None if subset is None else torch.randperm(n)[:subset].sort().values
        if subset is None:  # SAC draws at s' (no graph), then at s (tdrl's and TorchRL's order)
            with torch.no_grad():
                next_action, next_lp = tanh_normal(actor(nobs))
            new_action, lp = tanh_normal(actor(obs))
            scored = lp
        else:  # REDQ draws at s and s' at once; its temperature loss scores both draws
            both, scored = tanh_normal(actor(torch.stack([obs, nobs])))
            new_action, lp, next_action, next_lp = both[0], scored[0], both[1], scored[1]
        q_pi = critics(torch.cat([obs, new_action], -1), detach=True)
        q_pi = q_pi.amin(0) if subset is None else q_pi.mean(0)
        actor_loss = (alpha * lp - q_pi).mean()
        with torch.no_grad():
            nsa = torch.cat([nobs, next_action], -1)
            y = y_of(targets(nsa, members=members).amin(0) - alpha * next_lp)
        q = critics(torch.cat([obs, action], -1))
        q_loss, errors["td_error"] = members_loss(q, y, "sum" if subset is None else "mean")
        alpha_loss = -(log_alpha * (scored.detach() - act_dim)).mean()
        return actor_loss + q_loss + alpha_loss

    return [actor, critics, holder], losses, errors


def discrete_sac(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor, critics, targets, log_alpha, holder = entropy_regularized(loss)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    target_entropy = loss.target_entropy

    def policy(x: Tensor) -> tuple[Tensor, Tensor]:
        log_probs = torch.log_softmax(actor(x), -1)
        probs = log_probs.exp()
        return probs, log_probs.masked_fill(probs == 0, 0.0)

    def losses() -> Tensor:
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            probs, log_probs = policy(nobs)
            q_next = targets(nobs).amin(0)
            y = y_of((probs * (q_next - alpha * log_probs)).sum(-1, keepdim=True))
        values = critics(obs)
        q = values.gather(-1, action.view(1, -1, 1).expand(values.shape[0], -1, 1))
        err = F.smooth_l1_loss(q, y.expand_as(q), reduction="none").flatten(1).mean(1)
        errors["td_error"] = (q.detach() - y).abs().amax(0).squeeze(-1)
        probs, log_probs = policy(obs)
        actor_loss = (probs * (alpha * log_probs - values.detach().amin(0))).sum(-1).mean()
        entropy_term = (probs * log_probs).sum(-1)
        alpha_loss = -(log_alpha * (entropy_term.detach() + target_entropy)).mean()
        return actor_loss + err.sum() + alpha_loss

    return [actor, critics, holder], losses, errors


def cql(loss: nn.Module, b: TensorDict, gamma: float, n: int) -> Update:
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor, critics, targets, log_alpha, holder = entropy_regularized(loss)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    act_dim = action.shape[-1]
    reps = obs.expand(3 * n + 1, *obs.shape)

    def losses() -> Tensor:
        alpha = log_alpha.detach().exp()
        new_action, lp = tanh_normal(actor(obs))
        q_pi = critics(torch.cat([obs, new_action], -1), detach=True).amin(0)
        actor_loss = (alpha * lp - q_pi).mean()
        with torch.no_grad():
            uniform = torch.rand(n, *action.shape) * 2 - 1
            cur, cur_lp = tanh_normal(actor(obs), (n,))
            fol, fol_lp = tanh_normal(actor(nobs), (n,))
            next_action, _ = tanh_normal(actor(nobs))
            y = y_of(targets(torch.cat([nobs, next_action], -1)).amin(0))
            uniform_lp = torch.full_like(cur_lp, -act_dim * math.log(2.0))
            density = torch.cat([uniform_lp, cur_lp, fol_lp])
        actions = torch.cat([uniform, cur, fol, action.unsqueeze(0)])
        q = critics(torch.cat([reps, actions], -1))  # [2, 3n + 1, B, 1]
        pred = q[:, -1]
        q_loss, errors["td_error"] = members_loss(pred, y)
        cql_loss = (torch.logsumexp(q[:, :-1] - density, 1) - pred).mean(-1).mean(-1).sum()
        alpha_loss = -(log_alpha * (lp.detach() - act_dim)).mean()
        return actor_loss + q_loss + cql_loss + alpha_loss

    return [actor, critics, holder], losses, errors


def iql(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor = policy_mlp(loss.actor_network)
    value = plain_of(loss.value_network)
    critics, targets = stacked_pair(loss.qvalue_network)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    expectile, temperature = loss.expectile, loss.temperature

    def losses() -> Tensor:
        sa = torch.cat([obs, action], -1)
        with torch.no_grad():
            q_target = targets(sa).amin(0)
            y = y_of(value(nobs))
        v = value(obs)
        u = q_target - v
        value_loss = ((expectile - (u < 0).float()).abs() * u.square()).mean()
        q_loss, errors["td_error"] = members_loss(critics(sa), y)
        weights = torch.exp(temperature * (q_target - v.detach())).clamp(max=100.0)
        actor_loss = -(weights * tanh_normal_log_prob(actor(obs), action)).mean()
        return actor_loss + q_loss + value_loss

    return [actor, value, critics], losses, errors
