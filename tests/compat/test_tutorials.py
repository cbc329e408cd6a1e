"""Each ``tutorial_*.py`` script (TorchRL tutorial code with only the imports changed) runs on tdrl.

Every test runs the script's ``main`` with a tiny budget and checks what the tutorial would show:
shapes, keys, finite (and, where cheap, decreasing) losses and buffer contents.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(name: str, budget: int) -> dict[str, Any]:
    """Import ``tutorial_<name>`` from this folder and run its ``main(budget)``."""
    module = importlib.import_module(f"tutorial_{name}")
    return module.main(budget)


def test_env_transforms() -> None:
    out = run("env_transforms", 30)
    rollout = out["rollout"]
    assert rollout.batch_size == torch.Size([30])
    assert rollout["observation"].dtype == torch.float32
    assert out["loc"].shape == (3,) and out["scale"].shape == (3,)
    assert (out["scale"] > 0).all()
    assert rollout["next", "step_count"][-1].item() == 30
    assert rollout["next", "truncated"][-1].item()
    torch.testing.assert_close(
        rollout["next", "episode_reward"][-1], rollout["next", "reward"].sum(0)
    )
    spec = out["cartpole_action_spec"]
    assert type(spec).__name__ == "OneHot" and spec.dtype == torch.int64 and spec.shape == (2,)
    actions = out["cartpole_rollout"]["action"]
    assert actions.shape == (5, 2) and (actions.sum(-1) == 1).all()


def test_custom_env_batched_params() -> None:
    out = run("custom_env", 3)
    reset = out["batched_reset"]
    assert reset.batch_size == torch.Size([10])
    assert reset["params", "g"].shape == (10,)
    assert out["batched_rollout"].batch_size == torch.Size([10, 3])
    assert out["training_rollout"]["observation"].shape == (10, 20, 3)
    assert len(out["returns"]) == 3 and all(math.isfinite(r) for r in out["returns"])


def test_replay_buffer_tour() -> None:
    out = run("replay_buffers", 20)
    assert out["list_len"] == 4 and out["list_first"] == "a string"
    assert isinstance(out["list_sample"], list) and len(out["list_sample"]) == 4
    assert out["tensor_len"] == 20 and out["tensor_sample"].batch_size == (8,)
    torch.testing.assert_close(out["tensor_slice"]["reward"], torch.tensor([[0.0], [1.0], [2.0]]))
    idx = out["memmap_index"]
    torch.testing.assert_close(out["memmap_sample"]["reward"].squeeze(-1), idx.float())
    assert sorted(out["epoch_rewards"].flatten().tolist()) == [float(i) for i in range(20)]
    assert (out["prio_index"] == 0).float().mean() > 0.9
    assert out["prio_weight"].shape == (20,) and (out["prio_weight"] <= 1).all()
    assert out["add_len"] == 2 and out["add_sample"].batch_size == (1, 10)
    assert out["restored_len"] == 20
    torch.testing.assert_close(out["restored_all"]["obs"], out["data"]["obs"])


def test_dqn_lstm() -> None:
    out = run("dqn_lstm", 100)
    reset = out["reset"]
    assert "recurrent_state_h" in reset.keys() and "recurrent_state_c" in reset.keys()
    assert reset["recurrent_state_h"].shape == (1, 32)
    assert out["data"].batch_size == (50,)
    assert ("next", "recurrent_state_h") in out["data"].keys(True)
    assert out["sample"].batch_size == (4, 50)
    assert out["sequence_out"]["action_value"].shape == (4, 50, 2)
    losses = out["losses"]
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
    assert sum(losses[-2:]) < sum(losses[:2])
    assert abs(out["eps"] - 0.2 + 0.1 * 100 / 100) < 1e-4


def test_ppo_pendulum() -> None:
    out = run("ppo_pendulum", 200)
    logs = out["logs"]
    assert len(logs["reward"]) == 2 and len(logs["loss"]) == 16
    assert all(math.isfinite(v) for v in logs["loss"])
    assert logs["lr"] == [3e-4, 1.5e-4]
    data = out["data"]
    assert data.batch_size == (100,)
    assert {"advantage", "value_target", "action_log_prob"} <= set(data.keys())
    assert out["eval_rollout"].batch_size == (50,)
    assert {"loss_objective", "loss_critic", "loss_entropy"} <= set(out["loss_vals"].keys())


def test_sac() -> None:
    out = run("sac", 200)
    assert out["buffer_len"] == 200 and out["sample"].batch_size == (32,)
    assert len(out["losses"]) == 6
    for loss in out["losses"]:
        assert set(loss) == {"loss_actor", "loss_qvalue", "loss_alpha"}
        assert all(math.isfinite(v) for v in loss.values())
    assert out["alpha"] < 1.0


def test_multiagent_ppo() -> None:
    out = run("multiagent_ppo", 400)
    data = out["data"]
    assert data.batch_size == (4, 50)
    assert data["agents", "action"].shape == (4, 50, 3, 2)
    assert data["agents", "state_value"].shape == (4, 50, 3, 1)
    assert data["next", "agents", "episode_reward"].shape == (4, 50, 3, 1)
    assert len(out["logs"]["loss"]) == 4 and all(math.isfinite(v) for v in out["logs"]["loss"])


def test_td3_gaussian_exploration() -> None:
    out = run("td3", 200)
    assert len(out["q_losses"]) == 8 and len(out["actor_losses"]) == 4
    assert all(math.isfinite(v) for v in out["q_losses"] + out["actor_losses"])
    actions = out["actions"]
    assert actions.shape == (200, 1) and actions.abs().max() <= 2.0
    assert abs(out["sigma"] - 0.1) < 1e-4
    assert {"loss_actor", "loss_qvalue"} <= set(out["full_loss"].keys())


def test_ddpg_ou_exploration() -> None:
    out = run("ddpg", 200)
    assert len(out["losses"]) == 4
    for loss in out["losses"]:
        assert {"loss_actor", "loss_value"} <= set(loss) and all(map(math.isfinite, loss.values()))
    assert out["actions"].shape == (200, 1) and out["actions"].abs().max() <= 2.0
    assert "is_init" in out["data"].keys()


def test_collectors() -> None:
    out = run("collectors", 40)
    manual = out["manual"]
    assert manual.batch_size == (5,)
    torch.testing.assert_close(manual["next", "observation"][:-1], manual["observation"][1:])
    obs = out["serial_reset"]["observation"]
    assert obs.shape == (2, 3) and not torch.equal(obs[0], obs[1])
    assert out["serial_rollout"].batch_size == (2, 3)
    batches = out["batches"]
    assert len(batches) == 4 and all(b.batch_size == (10,) for b in batches)
    assert len({b["observation"].data_ptr() for b in batches}) == 4
    multi = out["multi_batches"]
    assert len(multi) == 2 and all(b.batch_size == (2, 10) for b in multi)
