"""MaskedActionEnv: the published mask, legal/illegal actions, rewards and specs."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.builtin import MaskedActionEnv
from tdrl.envs.core import check_env_specs

BATCHES = [(), (2, 3)]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("categorical", [False, True])
def test_check_env_specs(batch, categorical):
    env = MaskedActionEnv(batch_size=batch, categorical_action_encoding=categorical)
    check_env_specs(env)
    assert "action_mask" in env.observation_keys
    assert env.full_observation_spec["action_mask"].shape == (*batch, 5)


@pytest.mark.parametrize("categorical", [False, True])
def test_random_actions_honouring_the_mask_never_terminate(categorical):
    env = MaskedActionEnv(batch_size=(64,), max_steps=10, categorical_action_encoding=categorical)
    env.set_seed(0)
    td = env.reset()
    for t in range(10):
        mask = td["action_mask"]
        assert mask.any(-1).all() and not mask.all()
        env.action_spec.update_mask(mask)
        td = env.step(env.rand_action(td))
        index = td["action"] if categorical else td["action"].long().argmax(-1)
        assert mask.gather(-1, index.unsqueeze(-1)).all()
        nxt = td["next"]
        assert not nxt["terminated"].any()
        assert ((nxt["reward"] == 0) | (nxt["reward"] == 1)).all()
        assert nxt["truncated"].all() == (t == 9)
        td = env.step_mdp(td)


def test_cue_policy_scores_every_step_and_cue_is_always_legal():
    env = MaskedActionEnv(batch_size=(16,), n_actions=6, max_steps=8)
    env.set_seed(1)

    def cue_policy(td):
        cue = td["observation"].argmax(-1)
        assert td["action_mask"].gather(-1, cue.unsqueeze(-1)).all()
        return td.set("action", torch.nn.functional.one_hot(cue, 6))

    data = env.rollout(24, cue_policy, break_when_any_done=False)
    assert data["next", "reward"].eq(1).all()
    assert data["next", "truncated"].sum() == 16 * 3
    assert not data["next", "terminated"].any()


def test_illegal_action_is_penalised_and_terminates():
    env = MaskedActionEnv(batch_size=(32,), categorical_action_encoding=True)
    env.set_seed(2)
    td = env.reset()
    has_illegal = ~td["action_mask"].all(-1, keepdim=True)
    assert has_illegal.sum() > 16
    illegal = (~td["action_mask"]).long().argmax(-1)
    td = env.step(td.set("action", illegal))
    nxt = td["next"]
    assert torch.equal(nxt["terminated"], has_illegal) and torch.equal(nxt["done"], has_illegal)
    assert torch.equal(nxt["reward"] == -1, has_illegal)
    td = env.reset(env.step_mdp(td).set("_reset", torch.ones(32, 1, dtype=torch.bool)))
    assert not td["done"].any()


def test_partial_reset_keeps_the_cue_of_other_members():
    env = MaskedActionEnv(batch_size=(4,))
    td = env.reset()
    mask = torch.tensor([[True], [False], [True], [False]])
    cues = td["observation"].clone()
    legal = td["action_mask"].clone()
    for _ in range(5):
        out = env.reset(td.clone().set("_reset", mask))
        assert torch.equal(out["observation"][1::2], cues[1::2])
        assert torch.equal(out["action_mask"][1::2], legal[1::2])
        td = out
    # Five resets of members 0 and 2 draw new cues at least once.
    assert not torch.equal(td["action_mask"][::2], legal[::2])


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="n_actions"):
        MaskedActionEnv(n_actions=1)


def test_seeding_is_reproducible():
    def run(seed: int):
        env = MaskedActionEnv(batch_size=(4,), categorical_action_encoding=True)
        env.set_seed(seed)
        policy = lambda td: td.set("action", td["observation"].argmax(-1))  # noqa: E731
        return env.rollout(20, policy, break_when_any_done=False)["action_mask"]

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


@pytest.mark.parametrize("categorical", [False, True])
def test_rollout_without_policy_draws_only_legal_actions(categorical):
    env = MaskedActionEnv(batch_size=(32,), max_steps=12, categorical_action_encoding=categorical)
    env.set_seed(3)
    data = env.rollout(12)
    assert data.batch_size == (32, 12)
    index = data["action"] if categorical else data["action"].long().argmax(-1)
    assert data["action_mask"].gather(-1, index.unsqueeze(-1)).all()
    assert not data["next", "terminated"].any()
    td = env.reset()
    for _ in range(5):
        td = env.rand_action(td)
        index = td["action"] if categorical else td["action"].long().argmax(-1)
        assert td["action_mask"].gather(-1, index.unsqueeze(-1)).all()
        td = env.step_mdp(env.step(td))


def test_serial_env_of_masked_envs_draws_legal_actions():
    from tdrl.envs.batched import SerialEnv

    env = SerialEnv(2, MaskedActionEnv, {"batch_size": (8,), "max_steps": 6})
    env.set_seed(0)
    data = env.rollout(6)
    assert data["action_mask"].gather(-1, data["action"].long().argmax(-1, keepdim=True)).all()
    assert not data["next", "terminated"].any()
