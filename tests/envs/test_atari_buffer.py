"""Memory-lean frame stacking on buffer data: single screens stored, stacks built at sampling."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ale_py")

from tdrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler
from tdrl.envs import CatFrames, make_atari_env

GAME = "ALE/Breakout-v5"
N = 4


def _rollout(frame_stack: int, steps: int) -> torch.Tensor:
    env = make_atari_env(
        GAME, noop_max=0, frame_stack=frame_stack, categorical_action_encoding=True
    )
    env.set_seed(0)
    torch.manual_seed(0)
    actions = torch.randint(env.action_spec.n, (steps,), generator=torch.Generator().manual_seed(1))
    td = env.reset()
    out = []
    for a in actions.tolist():
        td["action"] = torch.tensor(a)
        td = env.step(td)
        out.append(td.clone())
        td = env.reset() if bool(td["next", "done"]) else env.step_mdp(td)
    env.close()
    return torch.stack(out)


def test_single_frames_in_the_buffer_stack_as_the_env_does():
    steps = 60
    stacked = _rollout(N, steps)  # what an env with CatFrames hands out
    single = _rollout(1, steps)  # the same game, one screen per step
    assert single["pixels"].shape == (steps, 1, 84, 84)
    keys = ["pixels", ("next", "pixels")]
    rb = ReplayBuffer(
        storage=LazyTensorStorage(1000),
        sampler=SliceSampler(slice_len=N, traj_key="episode", strict_length=True),
        batch_size=8 * N,
        transform=lambda td: CatFrames(N, -3, in_keys=keys)(td.reshape(-1, N))[:, -1],
    )
    single["episode"] = torch.zeros(steps, dtype=torch.int64)
    rb.extend(single)
    # the storage holds one screen per step: stacks are not stored N times
    assert rb.storage.get(torch.arange(steps))["pixels"].shape == (steps, 1, 84, 84)
    torch.manual_seed(0)
    for _ in range(3):
        batch, info = rb.sample(return_info=True)
        assert batch["pixels"].shape == (8, N, 84, 84)
        index = info["index"].reshape(-1, N)[:, -1]  # the stack's step: its slice's last one
        torch.testing.assert_close(batch["pixels"], stacked["pixels"][index])
        torch.testing.assert_close(batch["next", "pixels"], stacked["next", "pixels"][index])
