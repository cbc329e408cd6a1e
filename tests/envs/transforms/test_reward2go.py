"""Reward2GoTransform and TargetReturn: TorchRL's numbers on the same data, specs, errors.

The reference numbers come from TorchRL 0.14.1, recorded by
tools/dt_reference/gen_dt_transforms.py into dt_fixtures/dt_transforms.safetensors.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from tensordict import TensorDict, TensorDictBase

from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import EnvBase, Reward2GoTransform, TargetReturn, TransformedEnv
from tdrl.envs.transforms._reward2go import reward_to_go
from tdrl.specs import Composite, Unbounded
from tdrl.testing import CountingEnv

FIXTURE = pathlib.Path(__file__).parent / "dt_fixtures" / "dt_transforms.safetensors"
REF = load_file(str(FIXTURE))
with safe_open(str(FIXTURE), "pt") as _f:
    META = json.loads(_f.metadata()["meta"])


def loop_reward_to_go(reward: torch.Tensor, done: torch.Tensor, gamma: float) -> torch.Tensor:
    """Plain reference: a backwards loop over time (dim -2), restarting after each end."""
    out = torch.zeros_like(reward)
    running = torch.zeros_like(reward[..., 0, :])
    for t in reversed(range(reward.shape[-2])):
        running = reward[..., t, :] + gamma * running * (~done[..., t, :]).float()
        if t == reward.shape[-2] - 1:
            running = reward[..., t, :].clone()
        out[..., t, :] = running
    return out


@pytest.mark.parametrize("gamma", [1.0, 0.99, 0.5])
def test_reward2go_matches_torchrl_2d(gamma: float) -> None:
    reward, done = REF["r2g.2d.reward"], REF["r2g.2d.done"]
    td = TensorDict({"next": {"reward": reward, "done": done}}, [3, 50])
    out = Reward2GoTransform(gamma=gamma, out_keys=["return_to_go"]).inv(td)
    torch.testing.assert_close(out["return_to_go"], REF[f"r2g.2d.g{gamma}"], rtol=1e-5, atol=1e-5)
    assert "return_to_go" not in td.keys()  # inv works on a copy of the input
    over = Reward2GoTransform(gamma=gamma).inv(td)  # default out_keys: over the reward
    torch.testing.assert_close(over["next", "reward"], REF[f"r2g.2d.g{gamma}.over"])
    torch.testing.assert_close(td["next", "reward"], reward)


def test_reward2go_matches_torchrl_1d_and_a_loop() -> None:
    reward, done = REF["r2g.1d.reward"], REF["r2g.1d.done"]
    td = TensorDict({"next": {"reward": reward, "done": done}}, [200])
    out = Reward2GoTransform(gamma=0.9, out_keys=[("next", "rtg")]).inv(td)
    torch.testing.assert_close(out["next", "rtg"], REF["r2g.1d.g0.9"])
    torch.testing.assert_close(out["next", "rtg"], loop_reward_to_go(reward, done, 0.9))


@pytest.mark.parametrize("length", [1, 2, 7, 64, 100])
def test_scan_equals_the_loop(length: int) -> None:
    torch.manual_seed(length)
    reward = torch.randn(2, 3, length, 1, dtype=torch.float64)
    done = torch.rand(2, 3, length, 1) < 0.2
    for gamma in (0.0, 0.7, 1.0):
        expected = loop_reward_to_go(reward, done, gamma)
        torch.testing.assert_close(reward_to_go(reward, done, gamma), expected)


def test_reward2go_in_a_replay_buffer_runs_on_extend() -> None:
    reward, done = REF["r2g.2d.reward"], REF["r2g.2d.done"]
    rb = ReplayBuffer(
        storage=LazyTensorStorage(300),
        transform=Reward2GoTransform(gamma=0.95, out_keys=["return_to_go"]),
    )
    rb.extend(TensorDict({"next": {"reward": reward, "done": done}}, [3, 50]))
    stored = rb[:]
    assert sorted(str(k) for k in stored.keys(True, True)) == META["rb_keys"]
    torch.testing.assert_close(stored["return_to_go"], REF["r2g.rb.g0.95"])


def test_reward2go_errors() -> None:
    t = Reward2GoTransform()
    with pytest.raises(ValueError, match="cannot be part of an env"):
        TransformedEnv(CountingEnv(), Reward2GoTransform())
    done = torch.zeros(2, 4, 1, dtype=torch.bool)
    done[0, 1] = True  # the second row has no end
    no_end = TensorDict({"next": {"reward": torch.ones(2, 4, 1), "done": done}}, [2, 4])
    with pytest.raises(RuntimeError, match="holds no episode end"):
        t.inv(no_end)
    with pytest.raises(KeyError, match="done entry"):
        t.inv(TensorDict({"next": {"reward": torch.ones(4, 1)}}, [4]))
    with pytest.raises(KeyError, match="none of the reward entries"):
        t.inv(TensorDict({"next": {"done": torch.ones(4, 1, dtype=torch.bool)}}, [4]))
    sample = TensorDict({"next": {"reward": torch.ones(4, 1)}}, [4])
    assert t(sample) is sample  # sampled data passes through


class StepRewardEnv(EnvBase):
    """The generator's env: batch [2], reward 0.5 * count + 0.25, row i ends at 3 + 2i."""

    def __init__(self) -> None:
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(observation=Unbounded((2, 1)), shape=(2,))
        self.action_spec = Unbounded((2, 1))
        self.reward_spec = Unbounded((2, 1))
        self.full_done_spec = self.default_done_spec()
        self.limit = torch.tensor([[3.0], [5.0]])

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        return TensorDict(observation=torch.zeros(2, 1), batch_size=[2])

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs = tensordict["observation"] + 1
        done = obs >= self.limit
        return TensorDict(observation=obs, reward=0.5 * obs + 0.25, terminated=done, batch_size=[2])

    def _set_seed(self, seed: int | None) -> None:
        pass


@pytest.mark.parametrize("mode", ["reduce", "constant"])
def test_target_return_matches_torchrl_with_partial_resets(mode: str) -> None:
    env = TransformedEnv(StepRewardEnv(), TargetReturn(10.0, mode=mode))
    assert sorted(env.observation_spec.keys(True, True)) == META[f"{mode}.obs_spec"]
    assert sorted(env.state_spec.keys(True, True)) == META[f"{mode}.state_spec"]
    spec = env.observation_spec["target_return"]
    assert list(spec.shape) == META[f"{mode}.spec_shape"] and spec.dtype == torch.float32
    td = env.rollout(9, break_when_any_done=False)
    torch.testing.assert_close(td["next", "reward"], REF[f"tr.{mode}.reward"])
    torch.testing.assert_close(td["target_return"], REF[f"tr.{mode}.root"])
    torch.testing.assert_close(td["next", "target_return"], REF[f"tr.{mode}.next"])


def test_target_return_keys_and_errors() -> None:
    env = TransformedEnv(CountingEnv(), TargetReturn(5.0, out_keys=["rtg"]))
    assert env.transform.in_keys == ["reward"] and env.transform.reset_key == "_reset"
    assert env.rollout(2)["next", "rtg"].flatten().tolist() == [4.0, 3.0]
    with pytest.raises(ValueError, match="unknown mode 'up'"):
        TargetReturn(1.0, mode="up")
    with pytest.raises(KeyError, match="not reward keys"):
        TransformedEnv(CountingEnv(), TargetReturn(1.0, in_keys=["observation"]))
    with pytest.raises(KeyError, match="not a _reset key"):
        TransformedEnv(CountingEnv(), TargetReturn(1.0, reset_key=("agents", "_reset")))
    with pytest.raises(RuntimeError, match="only works inside an env"):
        TargetReturn(1.0)(TensorDict(reward=torch.ones(1)))
