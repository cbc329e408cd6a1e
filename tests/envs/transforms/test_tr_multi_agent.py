"""Per-agent resets through every stateful transform on the built-in multi-agent env."""

from __future__ import annotations

import torch

from tdrl.envs import (
    CatFrames,
    Compose,
    InitTracker,
    MultiAgentNavigationEnv,
    RewardSum,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
    VecNorm,
    check_env_specs,
)
from tdrl.specs import Unbounded


def _env():
    transforms = Compose(
        StepCounter(),
        RewardSum(),
        InitTracker(),
        TensorDictPrimer({("agents", "h"): Unbounded(shape=(3, 2))}, expand_specs=True),
        CatFrames(2, -1, ("agents", "observation"), ("agents", "frames")),
        VecNorm(("agents", "observation"), ("agents", "normed"), decay=1.0),
    )
    return TransformedEnv(MultiAgentNavigationEnv(batch_size=(2,), n_agents=3), transforms)


def test_specs_and_rollout():
    env = _env()
    check_env_specs(env)
    td = env.rollout(6, break_when_any_done=False)
    assert td["next", "agents", "step_count"].shape == (2, 6, 3, 1)
    assert td["next", "agents", "frames"].shape == (2, 6, 3, 8)


def test_one_agent_resets_and_every_other_value_stays():
    env = _env()
    torch.manual_seed(0)
    td = env.reset()
    for _ in range(3):
        td = env.step_mdp(env.step(env.rand_action(td)))
    td["agents", "h"] = torch.randn(2, 3, 2)
    before = td.clone()
    count = env.transform[5].count_0.clone()
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 0] = True
    td["agents", "_reset"] = mask
    out = env.reset(td)
    keep = ~mask
    for key in before.keys(True, True):
        old, new = before[key], out[key]
        if isinstance(key, tuple) and key[0] == "agents":
            m = keep.reshape(2, 3, *([1] * (new.ndim - 2))).expand(new.shape)
            assert new[m].equal(old[m]), key
        else:
            assert new.equal(old), key
    agent = ("agents",)
    assert out[(*agent, "step_count")][1, 0].item() == 0
    assert out[(*agent, "episode_reward")][1, 0].item() == 0.0
    assert out[(*agent, "is_init")][1, 0].item()
    assert out[(*agent, "h")][1, 0].eq(0).all()
    frame = out[(*agent, "observation")][1, 0]
    assert out[(*agent, "frames")][1, 0].equal(torch.cat([frame, frame]))
    added = env.transform[5].count_0 - count
    # TorchRL's VecNorm counts every row of a reset: each agent of the 2 rows, once more
    assert added.eq(2).all()
