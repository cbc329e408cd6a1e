"""``tdrl train dt``: context windows and returns-to-go of the dataset, the run directory and
--resume, evaluation with a target return, and the Decision Transformer fitting its data."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from safetensors.torch import load_file

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import CartPoleEnv, PendulumV1Env
from tdrl.modules import ExplorationType, set_exploration_type
from tdrl.train import latest_checkpoint, load_config
from tdrl.train._offline_data import OfflineData
from tdrl.train._offline_dt import DTTrainer, DTWindows
from tdrl.train.cli import make_trainer

pytestmark = pytest.mark.timeout(120)

SMALL = [
    "transformer.n_embd=16",
    "transformer.n_inner=16",
    "transformer.n_layer=1",
    "buffer.batch_size=4",
    "dt.context=5",
    "dt.inference_context=3",
    "eval.episodes=2",
    "eval.max_steps=20",
    "logging.log_every_updates=5",
]


class Killed(Exception):
    pass


def _pendulum_data(lengths=(30, 30, 30), seed=0):
    """Random Pendulum episodes of the given lengths with ``episode`` ids (Minari's layout)."""
    torch.manual_seed(seed)
    env = PendulumV1Env(batch_size=(len(lengths),))
    rollout = env.rollout(max(lengths), break_when_any_done=False)
    parts = []
    for i, n in enumerate(lengths):
        part = rollout[i, :n].clone()
        part.set("episode", torch.full((n,), i))
        part.get("next").set("done", torch.arange(n).eq(n - 1)[:, None])
        parts.append(part)
    flat = torch.cat(parts, 0)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(flat.numel()))
    buffer.extend(flat)
    buffer.env_id = "Pendulum-v1"
    return buffer


def _config(*extra):
    return load_config("dt", overrides=[*SMALL, *extra])


def _rows(run_dir, drop=("time", "updates_per_s")):
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _weights(run_dir):
    tensors = load_file(str(latest_checkpoint(run_dir) / "tensors.safetensors"))
    return {k: v for k, v in tensors.items() if k.startswith("module/")}


def test_windows_hold_one_episode_and_its_return_to_go():
    lengths = (7, 3, 10)  # the 3-step episode is shorter than the context: never drawn
    data = _pendulum_data(lengths)
    flat = data[0 : sum(lengths)]
    index = torch.arange(sum(lengths), dtype=torch.float32)
    flat.set("observation", torch.stack([index, torch.zeros_like(index), index * 0], -1))
    flat["next", "done"].zero_()  # the episode ids alone mark where episodes end
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(sum(lengths)))
    buffer.extend(flat)
    source = OfflineData(buffer, PendulumV1Env(), "test", 8)
    windows = DTWindows(source, context=4, batch_size=8, reward_scale=0.01, obs_norm=False)
    # plain return-to-go: the sum of the episode's rewards from each step on
    reward, episode = flat["next", "reward"][:, 0], flat["episode"]
    plain = torch.stack([reward[i:][episode[i:] == episode[i]].sum() for i in range(len(reward))])
    starts = [0, 7, 10]
    torch.testing.assert_close(windows.episode_returns, plain[starts])
    seen = set()
    for _ in range(20):
        batch = windows.sample()
        assert batch.batch_size == (8, 4)
        assert set(batch.keys()) == {"observation_cat", "action_cat", "return_to_go_cat"}
        for window in batch.unbind(0):
            idx = window["observation_cat"][:, 0].long()
            assert torch.equal(idx, torch.arange(idx[0], idx[0] + 4))  # consecutive steps
            assert len(set(episode[idx].tolist())) == 1  # of one episode
            torch.testing.assert_close(window["action_cat"], flat["action"][idx])
            torch.testing.assert_close(window["return_to_go_cat"][:, 0], plain[idx] * 0.01)
            seen.update(episode[idx].tolist())
    assert seen == {0, 2}


def test_observations_are_standardised_with_the_dataset_statistics():
    data = _pendulum_data((10, 12))
    obs = data[0:22]["observation"]
    windows = DTWindows(OfflineData(data, PendulumV1Env(), "t", 2), 4, 2, 1.0, True)
    torch.testing.assert_close(windows.loc, obs.mean(0))
    torch.testing.assert_close(windows.scale, obs.std(0))
    stored = windows.buffer[0:22]["observation_cat"]
    torch.testing.assert_close(stored, (obs - obs.mean(0)) / obs.std(0))


def test_the_loss_compares_the_actor_with_the_dataset_actions(tmp_path):
    trainer = DTTrainer(_config("updates=1"), tmp_path, dataset=_pendulum_data(), quiet=True)
    batch = trainer.windows.sample()
    loss = trainer.agent.loss.eval()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        out = loss(batch)
        predicted = loss.actor_network(batch.copy())["action"]
    assert predicted.shape == batch["action_cat"].shape
    plain = ((predicted - batch["action_cat"]) ** 2).mean()
    torch.testing.assert_close(out["loss"], plain)


def test_a_dt_run_writes_the_run_directory(tmp_path):
    config = _config("updates=20", "eval.every_updates=10", "logging.checkpoint_every_updates=10")
    trainer = make_trainer(config, tmp_path, dataset=_pendulum_data(), quiet=True)
    assert isinstance(trainer, DTTrainer)
    summary = trainer.run()
    assert summary["updates"] == 20 and summary["env"] == "Pendulum"
    rows = _rows(tmp_path)
    assert [int(r["updates"]) for r in rows] == [5, 10, 15, 20]
    assert [bool(r["eval_return"]) for r in rows] == [False, True, False, True]
    assert all(float(r["loss"]) > 0 for r in rows)
    assert (tmp_path / "learning_curve.png").is_file()
    ckpts = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "checkpoints").iterdir())
    assert ckpts == [10, 20]
    assert json.loads((tmp_path / "config.json").read_text())["algorithm"] == "dt"


def test_a_killed_and_resumed_dt_run_matches_an_uninterrupted_one(tmp_path):
    data = _pendulum_data()
    config = _config("updates=30", "eval.every_updates=10", "logging.checkpoint_every_updates=10")
    DTTrainer(config, tmp_path / "whole", dataset=data, quiet=True).run()
    cut = tmp_path / "cut"
    first = DTTrainer(config, cut, dataset=data, quiet=True)
    original = first._after_updates

    def dying(*args):
        original(*args)
        if first.frames >= 25:
            raise Killed

    first._after_updates = dying
    with pytest.raises(Killed):
        first.run()
    saved = json.loads((cut / "config.json").read_text())
    DTTrainer(saved, cut, dataset=data, quiet=True, resume=True).run()
    assert _rows(cut) == _rows(tmp_path / "whole")
    a, b = _weights(tmp_path / "whole"), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_learning_rate_warms_up_linearly(tmp_path):
    config = _config("updates=3", "optim.warmup_steps=4", "optim.lr=0.1")
    trainer = DTTrainer(config, tmp_path, dataset=_pendulum_data(), quiet=True)
    seen = []
    for _ in range(5):
        trainer._update_once(trainer.windows.sample())
        seen.append(trainer.optimizer.param_groups[0]["lr"])
    torch.testing.assert_close(torch.tensor(seen), torch.tensor([0.025, 0.05, 0.075, 0.1, 0.1]))


def test_evaluation_starts_from_the_target_return_and_reduces_it(tmp_path):
    data = _pendulum_data()
    trainer = DTTrainer(_config("dt.reward_scale=0.01"), tmp_path, dataset=data, quiet=True)
    rewards = data[0:90]["next", "reward"][:, 0].reshape(3, 30).sum(-1)
    assert trainer.eval_target_return == pytest.approx(float(rewards.max()))
    env = trainer.eval_env_for(PendulumV1Env(batch_size=(2,)))
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        td = env.rollout(4, trainer.policy, break_when_any_done=False)
    assert td["observation_cat"].shape == (2, 4, 5, 3)  # dt.context steps
    rtg = td["return_to_go_single"][0, :, 0]
    scaled = td["next", "reward"][0, :, 0]  # the env's reward times dt.reward_scale
    torch.testing.assert_close(rtg[0], torch.tensor(trainer.eval_target_return * 0.01))
    torch.testing.assert_close(rtg[1:], rtg[:-1] - scaled[:-1])
    fixed = DTTrainer(_config("dt.eval_target_return=-5"), tmp_path / "b", dataset=data, quiet=True)
    assert fixed.eval_target_return == -5.0


def test_discrete_datasets_and_unknown_targets_are_refused(tmp_path):
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(2,))
    rollout = env.rollout(10, break_when_any_done=False).reshape(-1)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
    buffer.extend(rollout)
    with pytest.raises(ValueError, match="continuous actions"):
        DTTrainer(_config("env='CartPole'"), tmp_path, dataset=buffer, quiet=True)
    with pytest.raises(ValueError, match="eval_target_return"):
        DTTrainer(
            _config("dt.eval_target_return='top'"), tmp_path, dataset=_pendulum_data(), quiet=True
        )


def test_dt_fits_a_deterministic_expert(tmp_path):
    """The actions of the data are a fixed function of the observation: a few hundred updates
    bring the DT's prediction error far below its error at the start."""
    data = _pendulum_data((40, 40, 40, 40))
    flat = data[0:160]
    obs = flat["observation"]
    flat.set("action", (-1.5 * obs[:, 1:2] - 0.5 * obs[:, 2:3]).clamp(-2, 2))  # a PD rule
    expert = TensorDictReplayBuffer(storage=LazyTensorStorage(160))
    expert.extend(flat)
    expert.env_id = "Pendulum-v1"
    config = _config(
        "updates=300",
        "optim.lr=1e-3",
        "optim.warmup_steps=10",
        "buffer.batch_size=16",
        "transformer.n_embd=32",
        "transformer.n_inner=64",
        "eval.every_updates=0",
        "logging.log_every_updates=100",
        "logging.checkpoint_every_updates=0",
    )
    trainer = DTTrainer(config, tmp_path, dataset=expert, quiet=True)
    torch.manual_seed(1)
    batch = torch.cat([trainer.windows.sample() for _ in range(4)], 0)

    def error():
        loss = trainer.agent.loss.eval()
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            value = float(loss(batch)["loss"])
        loss.train()
        return value

    before = error()
    trainer.run()
    after = error()
    assert after < 0.1 * before, (before, after)
