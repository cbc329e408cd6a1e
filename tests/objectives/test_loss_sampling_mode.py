"""Losses and the exploration type, as TorchRL 0.14.1 has them.

TorchRL runs every loss's ``forward`` under ``set_exploration_type(deterministic_sampling_mode)``
(``DETERMINISTIC``): policies called inside act deterministically and exploration modules add no
noise, whatever block the caller is in; the losses that need samples draw them in their own
``RANDOM`` blocks (``rsample``). So a loss gives the same values outside any block and inside a
``DETERMINISTIC`` or ``RANDOM`` block (checked against torchrl 0.14.1 on shared weights).
"""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictSequential

from tdrl.modules import (
    AdditiveGaussianModule,
    ExplorationType,
    ProbabilisticActor,
    TanhNormal,
    set_exploration_type,
)
from tdrl.objectives import (
    A2CLoss,
    ClipPPOLoss,
    CQLLoss,
    DDPGLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    IQLLoss,
    REDQLoss,
    ReinforceLoss,
    SACLoss,
    TD3Loss,
)
from tdrl.specs import Bounded
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
)

SPEC = Bounded(-1.0, 1.0, shape=(2,))


def _continuous():
    return make_transition_batch(batch=(6,))


def _one_hot():
    return make_transition_batch(batch=(6,), action="one_hot")


def _trajectories():
    batch = make_transition_batch(batch=(3, 4))
    batch["action_log_prob"] = -torch.rand(3, 4)
    return batch


CASES = {
    "sac": (lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic()), _continuous),
    "discrete_sac": (
        lambda: DiscreteSACLoss(make_categorical_actor(), make_action_value_net(), num_actions=2),
        _one_hot,
    ),
    "redq": (lambda: REDQLoss(make_tanh_normal_actor(), make_qvalue_critic()), _continuous),
    "cql": (lambda: CQLLoss(make_tanh_normal_actor(), make_qvalue_critic()), _continuous),
    "iql": (
        lambda: IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net()),
        _continuous,
    ),
    "discrete_iql": (
        lambda: DiscreteIQLLoss(
            make_categorical_actor(), make_action_value_net(), make_state_value_net()
        ).set_keys(state_action_value="action_value"),
        _one_hot,
    ),
    "td3": (
        lambda: TD3Loss(make_deterministic_actor(), make_qvalue_critic(), bounds=(-1.0, 1.0)),
        _continuous,
    ),
    "ddpg": (lambda: DDPGLoss(make_deterministic_actor(), make_qvalue_critic()), _continuous),
    "clip_ppo": (
        lambda: ClipPPOLoss(make_tanh_normal_actor(), make_state_value_net()),
        _trajectories,
    ),
    "a2c": (lambda: A2CLoss(make_tanh_normal_actor(), make_state_value_net()), _trajectories),
    "reinforce": (
        lambda: ReinforceLoss(make_tanh_normal_actor(), make_state_value_net()),
        _trajectories,
    ),
}
SAMPLING = ("sac", "redq", "cql")  # they draw actions from the actor inside the loss


def _run(loss, batch, mode: ExplorationType | None, seed: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    if mode is None:
        out = loss(batch.clone())
    else:
        with set_exploration_type(mode):
            out = loss(batch.clone())
    return {k: v.detach() for k, v in out.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_values_outside_and_inside_blocks(name) -> None:
    make_loss, make_batch = CASES[name]
    torch.manual_seed(0)
    loss, batch = make_loss(), make_batch()
    outside = _run(loss, batch, None)
    for mode in (ExplorationType.DETERMINISTIC, ExplorationType.RANDOM):
        inside = _run(loss, batch, mode)
        assert inside.keys() == outside.keys()
        for key, value in outside.items():
            torch.testing.assert_close(inside[key], value, msg=f"{name} {mode} {key}")
    if name in SAMPLING:  # the samples are drawn (with rsample) even in a DETERMINISTIC block
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            other = _run(loss, batch, None, seed=2)
        assert not torch.equal(other["loss_actor"], outside["loss_actor"])


def _noisy_actor() -> TensorDictSequential:
    actor = make_deterministic_actor()
    return TensorDictSequential(actor, AdditiveGaussianModule(SPEC, sigma_init=1.0))


@pytest.mark.parametrize("mode", [None, ExplorationType.RANDOM, ExplorationType.DETERMINISTIC])
def test_exploration_modules_are_off_inside_forward(mode) -> None:
    # TorchRL: DDPGLoss(actor + AdditiveGaussianModule) scores the noiseless action.
    torch.manual_seed(0)
    noisy = _noisy_actor()
    plain = DDPGLoss(noisy[0], make_qvalue_critic())
    loss = DDPGLoss(noisy, make_qvalue_critic())
    loss.load_state_dict(plain.state_dict(), strict=False)
    batch = _continuous()
    got, want = _run(loss, batch, mode), _run(plain, batch, mode)
    for key in ("loss_actor", "loss_value"):
        torch.testing.assert_close(got[key], want[key])


def test_deterministic_sampling_mode_is_the_loss_attribute() -> None:
    # TorchRL's LossModule.deterministic_sampling_mode: set it to RANDOM and the noise is back.
    torch.manual_seed(0)
    loss = DDPGLoss(_noisy_actor(), make_qvalue_critic())
    assert loss.deterministic_sampling_mode is ExplorationType.DETERMINISTIC
    batch = _continuous()
    base = _run(loss, batch, None)
    loss.deterministic_sampling_mode = ExplorationType.RANDOM
    assert not torch.equal(_run(loss, batch, None)["loss_actor"], base["loss_actor"])
    loss.deterministic_sampling_mode = "deterministic"  # type: ignore[assignment]
    torch.testing.assert_close(_run(loss, batch, None)["loss_actor"], base["loss_actor"])
    loss.deterministic_sampling_mode = 3  # type: ignore[assignment]
    with pytest.raises(TypeError, match="deterministic_sampling_mode"):
        _run(loss, batch, None)


def test_random_default_actor_acts_deterministically_in_td3() -> None:
    # A ProbabilisticActor that samples by default still acts deterministically in the loss.
    torch.manual_seed(0)
    stochastic = make_tanh_normal_actor()
    actor = ProbabilisticActor(
        stochastic[0],
        ["loc", "scale"],
        distribution_class=TanhNormal,
        default_interaction_type="random",
    )
    loss = TD3Loss(actor, make_qvalue_critic(), bounds=(-1.0, 1.0))
    batch = _continuous()
    first = _run(loss, batch, ExplorationType.RANDOM, seed=1)["loss_actor"]
    second = _run(loss, batch, ExplorationType.RANDOM, seed=2)["loss_actor"]
    torch.testing.assert_close(first, second)
