"""Run logging for multi-agent runs: late columns, per-group curves, per-agent-mean returns."""

from __future__ import annotations

import csv

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import MultiAgentNavigationEnv
from tdrl.train import EpisodeTracker, evaluate, evaluate_returns
from tdrl.train._logging import RunLogger, plot_learning_curve


def _read(path):
    with open(path) as f:
        return list(csv.reader(f))


def test_a_column_first_seen_later_is_kept(tmp_path):
    log = RunLogger(tmp_path, total_frames=30, quiet=True)
    log.log({"iteration": 1, "frames": 10})
    log.log({"iteration": 2, "frames": 20, "loss": 0.5, "train_return/agent": 1.0})
    log.log({"iteration": 3, "frames": 30, "loss": 0.25})
    log.close()
    header, *rows = _read(tmp_path / "metrics.csv")
    assert header[:6] == ["iteration", "frames", "time", "fps", "train_return", "eval_return"]
    assert header[6:] == ["loss", "train_return/agent"]
    loss, group = header.index("loss"), header.index("train_return/agent")
    assert [r[loss] for r in rows] == ["", "0.5", "0.25"]
    assert [r[group] for r in rows] == ["", "1", ""]
    # a resumed logger reads the wider header and keeps appending under it
    log = RunLogger(tmp_path, total_frames=40, quiet=True, start_frames=30)
    log.log({"iteration": 4, "frames": 40, "train_return/agent": 2.0})
    log.close()
    header2, *rows2 = _read(tmp_path / "metrics.csv")
    assert header2 == header and rows2[-1][group] == "2"


def test_per_group_columns_give_one_curve_per_group(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    log = RunLogger(tmp_path, total_frames=30, quiet=True)
    for i in range(1, 4):
        log.log(
            {
                "iteration": i,
                "frames": 10 * i,
                "train_return": float(i),
                "train_return/adversary": float(-i),
                "train_return/agent": float(2 * i),
                "eval_return/agent": float(i),
            }
        )
    log.close()
    seen = {}
    original = plt.Axes.plot

    def spy(ax, *args, **kwargs):
        seen[kwargs["label"]] = list(args[1])
        return original(ax, *args, **kwargs)

    plt.Axes.plot = spy
    try:
        assert plot_learning_curve(tmp_path) is not None
    finally:
        plt.Axes.plot = original
    assert seen["adversary: train return"] == [-1.0, -2.0, -3.0]
    assert seen["agent: train return"] == [2.0, 4.0, 6.0]
    assert seen["agent: eval return (deterministic)"] == [1.0, 2.0, 3.0]
    assert not any(label.startswith("train return") for label in seen)


def test_group_returns_are_sums_of_the_per_agent_mean_reward():
    env = MultiAgentNavigationEnv(batch_size=(3,), n_agents=2, max_steps=4)
    env.set_seed(0)
    actions = torch.rand(4, 3, 2, 2) * 2 - 1
    steps = iter(actions)

    def policy(td):
        td.set(("agents", "action"), next(steps))
        return td

    got = evaluate_returns(env, policy, {"agents": ("agents", "reward")}, reduce="mean")
    # the same actions replayed by hand on a fresh env seeded alike
    ref = MultiAgentNavigationEnv(batch_size=(3,), n_agents=2, max_steps=4)
    ref.set_seed(0)
    td = ref.reset()
    total = torch.zeros(3)
    for a in actions:
        td.set(("agents", "action"), a)
        td = ref.step(td)
        total += td["next", "agents", "reward"].squeeze(-1).mean(-1)
        td = ref.maybe_reset(ref.step_mdp(td))
    torch.testing.assert_close(torch.tensor(got["agents"]), total)
    # evaluate() keeps its team sum (the first reward entry summed over the agents)
    env.set_seed(0)
    steps = iter(actions)
    torch.testing.assert_close(torch.tensor(evaluate(env, policy)), 2 * total)


def test_episode_tracker_mean_over_agents():
    tracker = EpisodeTracker(("agents", "reward"), "done", reduce="mean")
    reward = torch.tensor([[1.0, 3.0], [2.0, 4.0], [5.0, 5.0]]).reshape(1, 3, 2, 1)
    done = torch.tensor([False, True, False]).reshape(1, 3, 1)
    batch = TensorDict({"next": {"agents": {"reward": reward}, "done": done}}, [1, 3])
    assert tracker.update(batch) == [2.0 + 3.0]  # (1+3)/2 + (2+4)/2
    with pytest.raises(ValueError, match="unknown reduction"):
        EpisodeTracker(reduce="max")
