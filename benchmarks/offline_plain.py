"""Plain-PyTorch offline updates: the baselines of ``test_losses_offline.py``.

Not a test module: the hand-written versions of the maths of tdrl's offline losses (``BCLoss``,
``TD3BCLoss``, ``DTLoss``, ``OnlineDTLoss``), as a careful PyTorch engineer writes them, on
plain tensors (no TensorDict, no tensordict module, no ``Distribution`` object). Every network
is a copy of the tdrl loss's own (same weights); the Decision Transformer actors are tdrl's
``DTActor``/``OnlineDTActor``, which are plain ``nn.Module``\\ s already, called directly on the
batch's tensors. Each builder returns what ``test_losses_offpolicy.plain_step`` takes: the
modules to optimise, the summed loss, and where the loss puts its per-sample TD error.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from offpolicy_plain import (
    Update,
    bootstrap,
    frozen_copy,
    plain_of,
    policy_mlp,
    stacked_pair,
    tanh_normal_log_prob,
)
from tensordict import TensorDict
from torch import Tensor, nn

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def inner(module: nn.Module, cls: type[nn.Module]) -> nn.Module:
    """A copy of the first ``cls`` inside a tdrl actor (the network it wraps)."""
    return copy.deepcopy(next(m for m in module.modules() if isinstance(m, cls)))


def tanh_gaussian_log_prob(x: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    """Log-density of ``tanh(x)`` for a pre-tanh draw ``x ~ N(loc, scale)``, summed over the
    action dim (the change of variables in its stable form, as ``TanhNormal``)."""
    normal = -0.5 * ((x - loc) / scale).square() - scale.log() - _HALF_LOG_2PI
    return (normal - 2 * (math.log(2) - x - F.softplus(-2 * x))).sum(-1)


# ----------------------------------------------------------------- behaviour cloning
def bc(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    """Deterministic actor, squared error to the dataset action (``BCLoss``'s default)."""
    actor = plain_of(loss.actor_network)
    obs, action = b["observation"], b["action"]

    def losses() -> Tensor:
        return (actor(obs) - action).square().mean()

    return [actor], losses, {}


def bc_nll(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    """TanhNormal policy, negative log-likelihood of the dataset action."""
    actor = policy_mlp(loss.actor_network)
    obs, action = b["observation"], b["action"]

    def losses() -> Tensor:
        return -tanh_normal_log_prob(actor(obs), action).mean()

    return [actor], losses, {}


# ----------------------------------------------------------------- TD3+BC
def td3bc(loss: nn.Module, b: TensorDict, gamma: float) -> Update:
    """TD3's critics; actor ``mse(pi(s), a) - lmbd * mean Q_0(s, pi(s))``,
    ``lmbd = alpha / mean |Q_0(s, pi(s))|`` (detached)."""
    errors: dict[str, Tensor] = {}
    y_of = bootstrap(b, gamma)
    actor = plain_of(loss.actor_network)
    target_actor = frozen_copy(actor)
    critics, targets = stacked_pair(loss.qvalue_network)
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    alpha, noise_std, clip = loss.alpha, loss.policy_noise, loss.noise_clip
    first = torch.zeros(1, dtype=torch.long)  # the first critic alone scores the policy

    def losses() -> Tensor:
        pi = actor(obs)
        q_pi = critics(torch.cat([obs, pi], -1), detach=True, members=first)[0]
        lmbd = alpha / q_pi.detach().abs().mean()
        actor_loss = F.mse_loss(pi, action) - lmbd * q_pi.mean()
        with torch.no_grad():
            next_action = target_actor(nobs)
            noise = (torch.randn_like(next_action) * noise_std).clamp(-clip, clip)
            smoothed = (next_action + noise).clamp(-1.0, 1.0)
            y = y_of(targets(torch.cat([nobs, smoothed], -1)).amin(0))
        q = critics(torch.cat([obs, action], -1))
        per_member = F.smooth_l1_loss(q, y.expand_as(q), reduction="none").flatten(1).mean(1)
        errors["td_error"] = (q.detach() - y).square().amax(0).squeeze(-1)
        return actor_loss + per_member.sum()

    return [actor, critics], losses, errors


# ----------------------------------------------------------------- Decision Transformers
def dt(loss: nn.Module, b: TensorDict, actor_cls: type[nn.Module]) -> Update:
    """``DTActor`` on the context windows, tanh-squashed (``TanhDelta`` on [-1, 1]), squared
    error to the dataset actions averaged over batch, time and action dims."""
    net = inner(loss.actor_network, actor_cls)
    obs, action, rtg = b["observation"], b["action"], b["return_to_go"]

    def losses() -> Tensor:
        return (torch.tanh(net(obs, action, rtg)) - action).square().mean()

    return [net], losses, {}


def online_dt(loss: nn.Module, b: TensorDict, actor_cls: type[nn.Module]) -> Update:
    """``OnlineDTActor``'s TanhNormal: the dataset actions' negative log-likelihood, the
    entropy bonus ``-alpha * H`` (``H`` from reparameterised draws) and the temperature loss
    ``alpha * (H - target_entropy)`` (``H`` detached), each averaged over batch and time."""
    net = inner(loss.actor_network, actor_cls)
    log_alpha = nn.Parameter(loss.log_alpha.detach().clone())
    target_entropy = float(loss.target_entropy)
    draws = loss.samples_mc_entropy
    obs, action, rtg = b["observation"], b["action"], b["return_to_go"]
    eps = torch.finfo(action.dtype).eps

    def losses() -> Tensor:
        loc, scale = net(obs, action, rtg)
        pre_image = torch.atanh(action.clamp(-1 + eps, 1 - eps))
        nll = -tanh_gaussian_log_prob(pre_image, loc, scale).mean()
        x = loc + scale * torch.randn(draws, *loc.shape)
        entropy = -tanh_gaussian_log_prob(x, loc, scale).mean(0)
        alpha = log_alpha.exp()
        entropy_loss = -(alpha.detach() * entropy).mean()
        alpha_loss = (alpha * (entropy.detach() - target_entropy)).mean()
        return nll + entropy_loss + alpha_loss

    return [net, nn.ParameterList([log_alpha])], losses, {}
