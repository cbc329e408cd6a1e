"""``tdrl train dt --online-frames N``: the Online Decision Transformer's model and optimisers,
online rounds of whole episodes stored with their return-to-go, windows mixed from the dataset
and those episodes, exact --resume while fine-tuning, and refusals."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from safetensors.torch import load_file

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import CartPoleEnv, PendulumV1Env
from tdrl.modules import ExplorationType, set_exploration_type
from tdrl.objectives import DTLoss, OnlineDTLoss
from tdrl.train import latest_checkpoint, load_config
from tdrl.train._offline import OfflineTrainer
from tdrl.train._offline_dt import DTTrainer
from tdrl.train._offline_odt import ODTTrainer, collect_episodes
from tdrl.train.cli import make_trainer

pytestmark = pytest.mark.timeout(120)

SMALL = [
    "transformer.n_embd=16",
    "transformer.n_inner=16",
    "transformer.n_layer=1",
    "buffer.batch_size=4",
    "dt.context=5",
    "dt.inference_context=3",
    "dt.reward_scale=0.01",
    "eval.episodes=2",
    "eval.max_steps=20",
    "logging.log_every_updates=5",
    "online.max_steps=25",
    "online.updates_per_episode=3",
]


class Killed(Exception):
    pass


def _pendulum_data(lengths=(30, 30, 30)):
    torch.manual_seed(0)
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


@pytest.fixture(scope="module")
def pendulum():
    return _pendulum_data()


def _config(*extra):
    return load_config("dt", overrides=[*SMALL, *extra])


def _rows(run_dir, drop=("time", "updates_per_s", "fps")):
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _weights(run_dir):
    tensors = load_file(str(latest_checkpoint(run_dir) / "tensors.safetensors"))
    return {k: v for k, v in tensors.items() if k.startswith(("module/", "optim"))}


def test_online_frames_train_the_online_dt_with_its_own_temperature_optimiser(tmp_path, pendulum):
    trainer = make_trainer(_config("updates=2", "online_frames=25"), tmp_path, dataset=pendulum)
    assert isinstance(trainer, ODTTrainer)
    assert isinstance(trainer.agent.loss, OnlineDTLoss)
    log_alpha = trainer.agent.loss.log_alpha
    assert float(log_alpha.detach().exp()) == pytest.approx(0.1)  # odt.alpha_init (TorchRL's 0.1)
    actor = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert id(log_alpha) not in actor  # no weight decay nor warm-up on the temperature
    assert [p for g in trainer.alpha_optimizer.param_groups for p in g["params"]] == [log_alpha]
    assert set(trainer.optimizers) == {"optim", "alpha"}
    before = float(log_alpha.detach())
    losses = trainer._update_once(trainer.windows.sample())
    assert float(log_alpha.detach()) != before
    assert set(losses) >= {"loss_log_likelihood", "loss_entropy", "loss_alpha", "alpha"}
    # dt.online alone gives the Online DT without an online phase; the plain dt keeps DTLoss
    offline_odt = make_trainer(_config("dt.online=true"), tmp_path / "b", dataset=pendulum)
    assert isinstance(offline_odt.agent.loss, OnlineDTLoss) and offline_odt.online_frames == 0
    plain = make_trainer(_config(), tmp_path / "c", dataset=pendulum)
    assert type(plain) is DTTrainer and isinstance(plain.agent.loss, DTLoss)


def test_an_online_dt_run_stores_whole_episodes_with_their_return_to_go(tmp_path, pendulum):
    config = _config(
        "updates=10",
        "online_frames=60",
        "eval.every_updates=10",
        "logging.checkpoint_every_updates=10",
        "odt.collect_target_return=-50",
    )
    trainer = make_trainer(config, tmp_path, dataset=pendulum, quiet=True)
    summary = trainer.run()
    rows = _rows(tmp_path)
    # 10 offline updates in rows of 5, then rounds of one 25-step episode and 3 updates each
    assert [(int(r["updates"]), int(r["frames"])) for r in rows] == [
        (5, 0), (10, 0), (13, 25), (16, 50), (19, 75)
    ]  # fmt: skip
    assert all(r["train_return"] for r in rows[2:]) and not any(r["train_return"] for r in rows[:2])
    assert summary["frames"] == 75 and summary["updates"] == 19  # whole episodes: past 60
    assert (tmp_path / "learning_curve.png").is_file()
    stored = trainer.buffer[0 : len(trainer.buffer)]
    assert len(stored) == 75
    episode = stored["episode"]
    assert episode.tolist() == [0] * 25 + [1] * 25 + [2] * 25
    reward = stored["next", "reward"][:, 0]
    plain = torch.stack([reward[i:][episode[i:] == episode[i]].sum() for i in range(75)])
    torch.testing.assert_close(stored["return_to_go_cat"][:, 0], plain)
    done = stored["next", "done"][:, 0]
    assert done.nonzero().flatten().tolist() == [24, 49, 74]
    # the standardised observations are the env's: cos^2 + sin^2 = 1 once un-standardised
    obs = stored["observation_cat"] * trainer.windows.scale + trainer.windows.loc
    torch.testing.assert_close(obs[:, 0] ** 2 + obs[:, 1] ** 2, torch.ones(75))
    assert stored["action_cat"].abs().max() <= 2.0
    # the train return is the episodes' return in the env's units (rewards were scaled)
    returns = [float(reward[episode == e].sum()) / 0.01 for e in range(3)]
    assert float(rows[-1]["train_return"]) == pytest.approx(sum(returns) / 3, rel=1e-4)


def test_online_episodes_are_conditioned_on_the_collect_target_return(tmp_path, pendulum):
    config = _config("updates=1", "online_frames=10", "odt.collect_target_return=-40")
    trainer = ODTTrainer(config, tmp_path, dataset=pendulum, quiet=True)
    env = trainer.eval_env_for(PendulumV1Env(batch_size=(2,)), trainer.collect_target_return)
    seen = []
    policy = trainer.policy

    def recording(td):
        seen.append(td["return_to_go_single"].clone())
        return policy(td)

    episodes = collect_episodes(env, recording, 6)
    assert [len(e) for e in episodes] == [6, 6]
    torch.testing.assert_close(seen[0], torch.full((2, 1), -40 * 0.01))
    for t in range(1, 6):  # reduced by each scaled reward
        step = torch.stack([e["next", "reward"][t - 1] for e in episodes])
        torch.testing.assert_close(seen[t], seen[t - 1] - step)
    best = ODTTrainer(_config("online_frames=10"), tmp_path / "b", dataset=pendulum, quiet=True)
    assert best.collect_target_return == pytest.approx(float(best.windows.episode_returns.max()))


def test_collected_actions_are_sampled_from_the_stochastic_policy(tmp_path, pendulum):
    trainer = ODTTrainer(_config("online_frames=10"), tmp_path, dataset=pendulum, quiet=True)

    def actions(seed):
        torch.manual_seed(seed)  # the env's generator is seeded from torch's too
        env = trainer.eval_env_for(PendulumV1Env(batch_size=(1,)), -40.0)
        return collect_episodes(env, trainer.policy, 4)[0]["action"]

    a, b = actions(3), actions(3)
    assert torch.equal(a, b)
    torch.manual_seed(3)
    env = trainer.eval_env_for(PendulumV1Env(batch_size=(1,)), -40.0)
    torch.manual_seed(4)  # the same start, other draws: other actions
    assert not torch.equal(a, collect_episodes(env, trainer.policy, 4)[0]["action"])
    with set_exploration_type(ExplorationType.DETERMINISTIC):  # overridden: RANDOM inside
        c = actions(3)
    assert torch.equal(a, c)


@pytest.mark.parametrize("fraction", [0.0, 0.5])
def test_batches_mix_dataset_and_online_windows(tmp_path, pendulum, fraction):
    config = _config("updates=2", "online_frames=25", f"online.dataset_fraction={fraction}")
    trainer = ODTTrainer(config, tmp_path, dataset=pendulum, quiet=True)
    trainer.run()
    online = trainer.buffer[0 : len(trainer.buffer)]["observation_cat"]
    offline = trainer.windows.buffer[0:90]["observation_cat"]
    batch = trainer._batch(trainer.buffer)
    assert batch.batch_size == (4, 5) and set(batch.keys()) == {
        "observation_cat",
        "action_cat",
        "return_to_go_cat",
    }

    def source(window):
        first = window["observation_cat"][0]
        if (online == first).all(-1).any():
            return "online"
        assert (offline == first).all(-1).any()
        return "dataset"

    k = round(4 * fraction)
    assert [source(w) for w in batch.unbind(0)] == ["dataset"] * k + ["online"] * (4 - k)
    assert trainer._batch(None).batch_size == (4, 5)


def test_a_run_killed_while_fine_tuning_resumes_exactly(tmp_path, pendulum):
    config = _config(
        "updates=10",
        "online_frames=100",
        "eval.every_updates=8",
        "logging.checkpoint_every_updates=6",
    )
    ODTTrainer(config, tmp_path / "whole", dataset=pendulum, quiet=True).run()
    cut = tmp_path / "cut"
    first = ODTTrainer(config, cut, dataset=pendulum, quiet=True)
    original = first._after_updates

    def dying(*args):
        original(*args)
        if first.frames >= 16:  # after 2 online rounds (3 updates each)
            raise Killed

    first._after_updates = dying
    with pytest.raises(Killed):
        first.run()
    # the newest checkpoint is the one after the first online round: one stored episode
    assert int(latest_checkpoint(cut).name.split("-")[1]) == 13
    saved = json.loads((cut / "config.json").read_text())
    resumed = ODTTrainer(saved, cut, dataset=pendulum, quiet=True, resume=True)
    summary = resumed.run()
    assert _rows(cut) == _rows(tmp_path / "whole")
    assert summary["frames"] == 100
    a, b = _weights(tmp_path / "whole"), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any("log_alpha" in k for k in a)


def test_refusals(tmp_path, pendulum):
    with pytest.raises(ValueError, match="collect_target_return"):
        ODTTrainer(
            _config("online_frames=10", "odt.collect_target_return='top'"),
            tmp_path,
            dataset=pendulum,
            quiet=True,
        )
    with pytest.raises(ValueError, match=r"fine-tunes \('iql', 'dt'\) only"):
        OfflineTrainer(
            load_config("cql", overrides=["online_frames=10"]), tmp_path, dataset=pendulum
        )
    cartpole = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
    cartpole.extend(CartPoleEnv(batch_size=(2,)).rollout(10, break_when_any_done=False).reshape(-1))
    with pytest.raises(ValueError, match="continuous actions"):
        make_trainer(_config("env='CartPole'", "online_frames=10"), tmp_path, dataset=cartpole)
