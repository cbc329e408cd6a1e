"""Collector batches of a gymnasium env stepped through rows (CollectorRows) hold exactly the
data, trajectory ids and state of the general loop, whatever the policy writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule

import tdrl.collectors._rows as rows_module
from tdrl.collectors import Collector
from tdrl.envs.libs import GymEnv
from tdrl.testing import assert_same_data


class GeneralGymEnv(GymEnv):
    """Overrides a hook: the collector then runs every step with the general loop."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return super()._step(tensordict)


class Spy:
    """Counts the batches whose steps went through rows to the end (finish was called)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.finished = 0
        finish = rows_module.CollectorRows.finish

        def spy(rows, data):
            self.finished += 1
            return finish(rows, data)

        monkeypatch.setattr(rows_module.CollectorRows, "finish", spy)


def _batches(env: GymEnv, policy: Any, batches: int, **kwargs: Any) -> tuple[list, dict]:
    env.set_seed(3)
    torch.manual_seed(0)
    collector = Collector(env, policy, total_frames=-1, **kwargs)
    out = []
    for batch in collector:
        out.append(batch.clone())
        if len(out) == batches:
            break
    state = collector.state_dict()
    collector.shutdown()
    return out, state


def _compare(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    policy: Callable[[], Any],
    batches: int = 4,
    env_kwargs: dict | None = None,
    **kwargs: Any,
) -> int:
    """Collects with both envs; returns how many batches ran through rows to the end."""
    spy = Spy(monkeypatch)
    env_kwargs = env_kwargs or {}
    fast, fast_state = _batches(GymEnv(name, **env_kwargs), policy(), batches, **kwargs)
    finished = spy.finished
    slow, slow_state = _batches(GeneralGymEnv(name, **env_kwargs), policy(), batches, **kwargs)
    assert spy.finished == finished  # the general env never uses rows
    for a, b in zip(fast, slow, strict=True):
        assert_same_data(a, b)
    assert fast_state["next_traj_id"] == slow_state["next_traj_id"]
    return finished


def _mlp_policy() -> TensorDictModule:
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return TensorDictModule(net, ["observation"], ["action"])


class ExtraOutputs(torch.nn.Module):
    """A policy writing more than the action (a mean, as stochastic actors do)."""

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        loc = td["observation"][..., :1].tanh() * 2
        return td.set("loc", loc).set("action", loc.clone())


class SwitchAt(torch.nn.Module):
    """Random Pendulum torques; from call ``at`` on, also replaces the observation it was given
    by an equal copy (the rows can only take the tensors they handed out)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.calls += 1
        if self.calls > self.at:
            td.set("observation", td["observation"] * 1.0)
        return td.set("action", torch.rand(1) * 4 - 2)


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_random_actions(monkeypatch, name):
    assert _compare(monkeypatch, name, lambda: None, frames_per_batch=150) == 4


def test_mlp_policy_over_episode_ends(monkeypatch):
    kwargs = {"env_kwargs": {"max_episode_steps": 45}}
    assert _compare(monkeypatch, "Pendulum-v1", _mlp_policy, frames_per_batch=100, **kwargs) == 4


def test_short_batches_use_the_general_loop(monkeypatch):
    assert _compare(monkeypatch, "CartPole-v1", lambda: None, frames_per_batch=32) == 0


def test_a_policy_with_other_outputs(monkeypatch):
    """The mean the policy writes beside the action is carried to the next root by step_mdp
    and stacked like the action."""
    kwargs = {"env_kwargs": {"max_episode_steps": 45}}
    assert _compare(monkeypatch, "Pendulum-v1", ExtraOutputs, frames_per_batch=100, **kwargs) == 4


def test_random_frames_before_a_policy_with_other_outputs(monkeypatch):
    """Random frames carry zeros where the policy writes its other outputs."""
    finished = _compare(
        monkeypatch, "Pendulum-v1", ExtraOutputs, frames_per_batch=100, init_random_frames=150
    )
    assert finished == 4


def test_random_frames_before_a_policy(monkeypatch):
    """The switch from random actions to the policy comes mid-batch (frame 150): the rows take
    both (the policy writes only the action)."""
    finished = _compare(
        monkeypatch, "Pendulum-v1", _mlp_policy, frames_per_batch=100, init_random_frames=150
    )
    assert finished == 4


def test_a_policy_that_changes_mid_batch_falls_back_with_the_same_data(monkeypatch):
    # the switch comes in batch 2, at its step 30: batch 1 through rows, the rest general
    finished = _compare(
        monkeypatch, "Pendulum-v1", lambda: SwitchAt(100 + 30), frames_per_batch=100
    )
    assert finished == 1


@pytest.mark.parametrize(
    "options",
    [
        {"split_trajs": True},
        {"set_truncated": True},
        {"reset_at_each_iter": True},
        {"return_same_td": True},
    ],
)
def test_collector_options(monkeypatch, options):
    env_kwargs = {"max_episode_steps": 40}
    finished = _compare(
        monkeypatch,
        "Pendulum-v1",
        lambda: None,
        frames_per_batch=90,
        env_kwargs=env_kwargs,
        **options,
    )
    assert finished == 4


def test_trajectory_ids_count_on_across_batches_and_states(monkeypatch):
    spy = Spy(monkeypatch)
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    collector = Collector(env, None, frames_per_batch=200, total_frames=600)
    batches = list(collector)
    assert spy.finished == 3
    ids = torch.cat([b["collector", "traj_ids"] for b in batches])
    done = torch.cat([b["next", "done"].squeeze(-1) for b in batches])
    assert int(done.sum()) > 10  # many episodes
    # an id rises by one exactly after each done, across batch boundaries too
    assert torch.equal(ids.diff(), done[:-1].long())
    assert collector.state_dict()["next_traj_id"] == int(ids[-1]) + 1 + int(done[-1])
