"""tdrl dataset collect: Minari datasets from a run's policy, a random policy or its buffer."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.train import load_config
from tdrl.train._checkpoint import latest_checkpoint, save_checkpoint
from tdrl.train._dataset_collect import (
    buffer_episodes,
    collect_dataset,
    collect_episodes,
    dataset_env_id,
)
from tdrl.train._evaluate_run import evaluate_run
from tdrl.train.cli import main, make_trainer

minari = pytest.importorskip("minari")

_SMALL = ["model.hidden=[8]", "eval.every_frames=0", "eval.episodes=1"]


def _train(tmp_path_factory, preset, overrides):
    out = tmp_path_factory.mktemp(preset) / "run"
    make_trainer(load_config(preset, overrides=_SMALL + overrides), out, quiet=True).run()
    return out


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    return _train(
        tmp_path_factory,
        "sac",
        [
            "frames=100",
            "collector.frames_per_batch=50",
            "collector.init_random_frames=50",
            "buffer.batch_size=16",
        ],
    )


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    # 2 envs, 5 batches of [2, 10] into a buffer of 70: it wraps and keeps rows 30..99
    return _train(
        tmp_path_factory,
        "dqn",
        [
            "frames=100",
            "num_envs=2",
            "collector.frames_per_batch=20",
            "collector.init_random_frames=100",
            "buffer.capacity=70",
            "buffer.batch_size=8",
        ],
    )


@pytest.fixture(autouse=True)
def datasets_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def _stored_buffer(run, capacity):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity))
    rb.loads(latest_checkpoint(run) / "buffer")
    return rb.storage.get(torch.arange(len(rb)))


def test_deterministic_episodes_are_tdrl_evals_episodes(sac_run):
    path = collect_dataset(sac_run, episodes=2, out="pendulum/det-v0", seed=7)
    ds = minari.load_dataset("pendulum/det-v0")
    assert path.name == "det-v0" and (ds.total_episodes, ds.total_steps) == (2, 400)
    assert ds.spec.env_spec.id == "Pendulum-v1"
    assert ds.recover_environment().spec.id == "Pendulum-v1"
    assert ds.storage.metadata["tdrl_env"] == "Pendulum"
    _, returns = evaluate_run(sac_run, episodes=2, seed=7)  # the same seeded envs, one policy
    got = [float(ep.rewards.sum()) for ep in ds.iterate_episodes()]
    np.testing.assert_allclose(got, returns, rtol=1e-5)
    for ep in ds.iterate_episodes():
        assert ep.observations.shape == (201, 3) and ep.actions.shape == (200, 1)
        assert ep.truncations.tolist() == [False] * 199 + [True]
        assert not ep.terminations.any()


def test_random_policy_is_seeded_and_within_the_action_space(sac_run):
    collect_dataset(sac_run, episodes=1, out="r1-v0", policy="random", seed=1)
    collect_dataset(sac_run, episodes=1, out="r2-v0", policy="random", seed=1)
    collect_dataset(sac_run, episodes=1, out="r3-v0", policy="random", seed=2)
    a1, a2, a3 = (
        next(minari.load_dataset(i).iterate_episodes()).actions for i in ("r1-v0", "r2-v0", "r3-v0")
    )
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, a3)
    assert a1.min() >= -2 and a1.max() <= 2 and a1.std() > 0.5  # uniform on [-2, 2]
    meta = minari.load_dataset("r1-v0").storage.metadata
    assert meta["algorithm_name"] == "random"


def test_mixed_dataset_by_appending(sac_run):
    collect_dataset(sac_run, episodes=1, out="mix-v0")
    collect_dataset(sac_run, episodes=2, out="mix-v0", policy="random", append=True)
    ds = minari.load_dataset("mix-v0")
    assert (ds.total_episodes, ds.total_steps) == (3, 600)
    assert ds.storage.metadata["algorithm_name"] == "tdrl-sac-deterministic + random"
    det, rnd = next(ds.iterate_episodes([0])), next(ds.iterate_episodes([1]))
    assert det.actions.std() < rnd.actions.std()  # the tiny policy does not spread like uniform


def test_collecting_keeps_the_callers_thread_count(sac_run):
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the run's trainer would set its config's 1
    try:
        collect_episodes(sac_run, episodes=1, policy="random")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_discrete_explore_episodes(dqn_run):
    collect_dataset(dqn_run, episodes=3, out="cp/explore-v0", policy="explore")
    ds = minari.load_dataset("cp/explore-v0")
    assert ds.spec.env_spec.id == "CartPole-v1" and ds.total_episodes == 3
    for ep in ds.iterate_episodes():
        assert ep.actions.dtype == np.int64 and set(ep.actions.tolist()) <= {0, 1}
        assert ep.terminations[-1] or ep.truncations[-1]


def test_buffer_of_one_env_is_its_rows_in_order(sac_run):
    collect_dataset(sac_run, out="pendulum/replay-v0", from_buffer=True)
    ds = minari.load_dataset("pendulum/replay-v0")
    rows = _stored_buffer(sac_run, 100_000)
    assert (ds.total_episodes, ds.total_steps) == (1, 100)
    ep = next(ds.iterate_episodes())
    np.testing.assert_array_equal(ep.actions, rows["action"].numpy())
    np.testing.assert_array_equal(ep.observations[:-1], rows["observation"].numpy())
    np.testing.assert_array_equal(ep.rewards, rows["next", "reward"].reshape(-1).double().numpy())
    assert ep.truncations.tolist() == [False] * 99 + [True]  # unfinished: stored truncated


def test_wrapped_buffer_of_two_envs_is_split_per_env(dqn_run):
    eps = buffer_episodes(dqn_run)
    rows = _stored_buffer(dqn_run, 70)
    kept = torch.cat([torch.arange(40, 70), torch.arange(0, 30)])  # written rows 40..99
    assert sum(e.batch_size[0] for e in eps) == 60
    for e in eps:
        done = e["next", "done"].reshape(-1)
        assert not done[:-1].any()
        # within an episode each step starts where the previous one ended
        assert torch.equal(e["observation"][1:], e["next", "observation"][:-1])

    def as_set(obs):
        return sorted(map(tuple, obs.tolist()))

    got = torch.cat([e["observation"] for e in eps])
    assert as_set(got) == as_set(rows["observation"][kept])
    collect_dataset(dqn_run, out="cp/replay-v0", from_buffer=True)
    ds = minari.load_dataset("cp/replay-v0")
    assert (ds.total_episodes, ds.total_steps) == (len(eps), 60)
    collect_dataset(dqn_run, out="cp/last-v0", from_buffer=True, episodes=2)
    last = list(minari.load_dataset("cp/last-v0").iterate_episodes())
    assert len(last) == 2
    for got, want in zip(last, eps[-2:], strict=True):
        np.testing.assert_array_equal(got.actions, want["action"].argmax(-1).numpy())


def test_cli_prints_the_dataset_and_the_train_command(sac_run, tmp_path, capsys):
    root = tmp_path / "elsewhere"
    argv = [
        "dataset",
        "collect",
        str(sac_run),
        "--episodes",
        "1",
        "--out",
        "cli-v0",
        "--policy",
        "random",
        "--root",
        str(root),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert str(root / "cli-v0") in out and "tdrl train iql --dataset minari:cli-v0" in out
    assert minari.MinariDataset(root / "cli-v0" / "data").total_steps == 200
    assert main(argv) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([*argv, "--overwrite", "--seed", "3"]) == 0
    assert main([*argv, "--append"]) == 0
    assert minari.MinariDataset(root / "cli-v0" / "data").total_steps == 400


def test_errors_name_the_path(sac_run, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere is not a run directory"):
        collect_dataset(tmp_path / "nowhere", episodes=1, out="e-v0")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(sac_run / "config.json", bare / "config.json")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint under .*bare"):
        collect_dataset(bare, episodes=1, out="e-v0")
    with pytest.raises(ValueError, match="--from-buffer takes the stored transitions"):
        collect_dataset(sac_run, out="e-v0", from_buffer=True, policy="random")
    with pytest.raises(ValueError, match="episodes must be an int >= 1"):
        collect_dataset(sac_run, episodes=0, out="e-v0")
    with pytest.raises(ValueError, match="unknown policy"):
        collect_dataset(sac_run, episodes=1, out="e-v0", policy="greedy")
    copy = tmp_path / "copy"
    shutil.copytree(sac_run, copy)
    config = json.loads((sac_run / "config.json").read_text())
    trainer = make_trainer(config, tmp_path / "scratch", quiet=True)
    # a newer checkpoint that verifies but holds no buffer
    save_checkpoint(copy, frames=200, modules=trainer.modules, optimizers={}, counters={})
    with pytest.raises(FileNotFoundError, match=r"stores no replay buffer .*buffer"):
        collect_dataset(copy, out="e-v0", from_buffer=True)
    nav = tmp_path / "nav"
    nav.mkdir()
    (nav / "config.json").write_text(json.dumps({**config, "env": "Navigation"}))
    with pytest.raises(ValueError, match=r"no gymnasium id .*'Navigation'"):
        collect_dataset(nav, episodes=1, out="e-v0")


def test_on_policy_run_has_no_buffer(tmp_path_factory):
    run = _train(
        tmp_path_factory, "ppo", ["frames=32", "num_envs=2", "collector.frames_per_batch=32"]
    )
    with pytest.raises(ValueError, match=r"keeps no replay buffer .*'ppo'"):
        collect_dataset(run, out="e-v0", from_buffer=True)


def test_env_ids():
    assert dataset_env_id("CartPole") == "CartPole-v1"
    assert dataset_env_id("gym:Acrobot-v1") == "Acrobot-v1"
