"""``tdrl train iql|cql|td3bc|bc`` on a dataset: the run directory (metrics by updates, curve,
checkpoints without the dataset), --resume continuing exactly, fine-tuning, the CLI flags and
the errors for datasets that do not fit."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from safetensors.torch import load_file

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import CartPoleEnv, PendulumV1Env
from tdrl.train import latest_checkpoint, load_config
from tdrl.train._offline import OfflineTrainer
from tdrl.train.cli import main, make_trainer

pytestmark = pytest.mark.timeout(120)

SMALL = [
    "model.hidden=[16]",
    "buffer.batch_size=16",
    "eval.episodes=2",
    "logging.log_every_updates=10",
]


def _data(env, steps: int, env_id: str | None = None):
    """Random transitions of ``env`` (batched) in TorchRL's layout, in a replay buffer."""
    rollout = env.rollout(steps, break_when_any_done=False)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(rollout.numel()))
    buffer.extend(rollout.reshape(-1))
    buffer.env_id = env_id  # what MinariExperienceReplay gives
    return buffer


@pytest.fixture
def pendulum():
    torch.manual_seed(0)
    return _data(PendulumV1Env(batch_size=(4,)), 50, "Pendulum-v1")


def _config(preset, *extra):
    return load_config(preset, overrides=[*SMALL, *extra])


def _rows(run_dir, drop=("time", "updates_per_s")):
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _weights(run_dir):
    tensors = load_file(str(latest_checkpoint(run_dir) / "tensors.safetensors"))
    return {k: v for k, v in tensors.items() if k.startswith("module/")}


@pytest.mark.parametrize("preset", ["iql", "cql", "td3bc", "bc"])
def test_the_run_directory_counts_updates(tmp_path, pendulum, preset):
    config = _config(
        preset,
        "updates=40",
        "eval.every_updates=20",
        "logging.checkpoint_every_updates=20",
        "loss.num_random=2" if preset == "cql" else "seed=0",
    )
    summary = OfflineTrainer(config, tmp_path, dataset=pendulum, quiet=True).run()
    assert summary["updates"] == 40 and summary["frames"] == 0
    assert summary["env"] == "Pendulum"  # the built-in twin of the dataset's Pendulum-v1
    rows = _rows(tmp_path)
    assert [int(r["updates"]) for r in rows] == [10, 20, 30, 40]
    assert {r["frames"] for r in rows} == {"0"}
    assert [bool(r["eval_return"]) for r in rows] == [False, True, False, True]
    assert any(k.startswith("loss_") and rows[-1][k] for k in rows[-1])
    assert (tmp_path / "learning_curve.png").is_file()
    ckpts = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "checkpoints").iterdir())
    assert ckpts == [20, 40]
    assert not (latest_checkpoint(tmp_path) / "buffer").exists()  # the dataset is not copied
    assert json.loads((tmp_path / "config.json").read_text())["env"] == "Pendulum"


class Killed(Exception):
    pass


def _kill_after(trainer, updates):
    original = trainer._after_updates

    def dying(*args):
        original(*args)
        if trainer.frames >= updates:
            raise Killed

    trainer._after_updates = dying


@pytest.mark.parametrize(
    ("preset", "extra", "kill_at"),
    [
        ("iql", [], 50),
        ("cql", ["loss.num_random=2", "loss.with_lagrange=true"], 50),
        # killed while fine-tuning: the online buffer, env state and owed updates are restored
        (
            "iql",
            ["online_frames=120", "online.frames_per_batch=30", "online.updates_per_frame=0.5"],
            75,
        ),
    ],
)
def test_a_killed_and_resumed_run_matches_an_uninterrupted_one(
    tmp_path, pendulum, preset, extra, kill_at
):
    config = _config(
        preset,
        "updates=60",
        "eval.every_updates=20",
        "logging.checkpoint_every_updates=20",
        *extra,
    )
    OfflineTrainer(config, tmp_path / "whole", dataset=pendulum, quiet=True).run()
    cut = tmp_path / "cut"
    first = OfflineTrainer(config, cut, dataset=pendulum, quiet=True)
    _kill_after(first, kill_at)
    with pytest.raises(Killed):
        first.run()
    assert int(latest_checkpoint(cut).name.split("-")[1]) < kill_at
    saved = json.loads((cut / "config.json").read_text())
    summary = OfflineTrainer(saved, cut, dataset=pendulum, quiet=True, resume=True).run()
    assert _rows(cut) == _rows(tmp_path / "whole")
    a, b = _weights(tmp_path / "whole"), _weights(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert summary["frames"] == config["online_frames"]


def test_fine_tuning_collects_and_mixes_the_dataset(tmp_path, pendulum):
    config = _config(
        "iql",
        "updates=20",
        "online_frames=400",
        "online.frames_per_batch=100",
        "online.updates_per_frame=0.1",
        "eval.every_updates=0",
    )
    trainer = OfflineTrainer(config, tmp_path, dataset=pendulum, quiet=True)
    drawn = []
    sample = trainer.data.sample
    trainer.data.sample = lambda n=None: drawn.append(n or 16) or sample(n)
    summary = trainer.run()
    assert summary["frames"] == 400 and summary["updates"] == 20 + 40
    assert len(trainer.buffer) == 400  # the fresh online buffer holds every collected frame
    # 20 offline batches of 16; online: half of each batch (8) from the dataset
    assert drawn[:20] == [16] * 20 and set(drawn[20:]) == {8}
    rows = _rows(tmp_path)
    assert [int(r["frames"]) for r in rows] == [0, 0, 100, 200, 300, 400]
    assert rows[-1]["train_return"]  # two 200-step episodes finished


def test_a_discrete_dataset_trains_the_discrete_losses(tmp_path):
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(4,))
    data = _data(env, 30, "CartPole-v1")
    # Minari stores Discrete actions as indices: the run gives the one-hot env its encoding
    indices = data[:]["action"].argmax(-1)
    categorical = TensorDictReplayBuffer(storage=LazyTensorStorage(len(data)))
    categorical.extend(data[:].set("action", indices))
    categorical.env_id = "CartPole-v1"
    for preset in ("iql", "cql"):
        trainer = OfflineTrainer(
            _config(preset, "updates=10", "eval.every_updates=10"),
            tmp_path / preset,
            dataset=categorical,
            quiet=True,
        )
        assert (
            type(trainer.agent.loss).__name__
            == {
                "iql": "DiscreteIQLLoss",
                "cql": "DiscreteCQLLoss",
            }[preset]
        )
        batch = trainer.data.sample()
        assert batch["action"].shape == (16, 2) and bool((batch["action"].sum(-1) == 1).all())
        assert trainer.run()["final_eval_return"] is not None


def test_a_dataset_that_does_not_fit_the_env_is_refused(tmp_path, pendulum):
    with pytest.raises(
        ValueError,
        match=r"does not fit the env CartPoleEnv .*observations of shape \[3\]; expected \[4\]",
    ):
        OfflineTrainer(_config("iql", "env='CartPole'"), tmp_path, dataset=pendulum, quiet=True)


def test_a_dataset_missing_an_entry_is_refused(tmp_path, pendulum):
    data = TensorDictReplayBuffer(storage=LazyTensorStorage(len(pendulum)))
    data.extend(pendulum[:].exclude(("next", "reward")))
    with pytest.raises(KeyError) as err:
        OfflineTrainer(_config("iql", "env='Pendulum'"), tmp_path, dataset=data, quiet=True)
    assert "lacks the entries [('next', 'reward')]" in err.value.args[0]


def test_a_dataset_without_env_needs_env(tmp_path, pendulum):
    pendulum.env_id = None
    with pytest.raises(ValueError, match=r"names no env .*--env"):
        OfflineTrainer(_config("iql"), tmp_path, dataset=pendulum, quiet=True)


def test_online_frames_are_for_iql_only(tmp_path, pendulum):
    with pytest.raises(ValueError, match=r"fine-tunes \('iql', 'dt'\) only"):
        OfflineTrainer(_config("cql", "online_frames=10"), tmp_path, dataset=pendulum, quiet=True)


@pytest.mark.parametrize("spec", ["", "pendulum/x-v0", "hf:pendulum/x-v0", "minari:"])
def test_a_bad_dataset_spec_is_refused(tmp_path, spec):
    match = "no dataset" if not spec else "unknown dataset"
    with pytest.raises(ValueError, match=match):
        OfflineTrainer(_config("iql", f"dataset={json.dumps(spec)}"), tmp_path, quiet=True)


def test_the_cli_trains_on_a_dataset_and_resume_reopens_it(tmp_path, pendulum, monkeypatch, capsys):
    import tdrl.train._offline as offline

    opened = []

    def open_dataset(spec, batch_size, root=None):
        opened.append((spec, batch_size))
        return pendulum

    monkeypatch.setattr(offline, "open_dataset", open_dataset)
    out = tmp_path / "run"
    args = ["train", "iql", "--dataset", "minari:pendulum/random-v0", "--updates", "20"]
    args += ["--out", str(out), "--quiet", *[a for s in SMALL for a in ("--set", s)]]
    assert main(args) == 0
    assert opened == [("minari:pendulum/random-v0", 16)]
    assert json.loads((out / "summary.json").read_text())["updates"] == 20
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert opened[-1] == ("minari:pendulum/random-v0", 16)  # the spec kept in config.json


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["train", "iql", "--frames", "10"], "--frames does not apply .*Use --updates"),
        (["train", "sac", "--dataset", "minari:x-v0"], "--dataset does not apply"),
        (["train", "sac", "--online-frames", "10"], "--online-frames does not apply"),
    ],
)
def test_cli_flags_of_the_other_kind_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        main(args)


def test_make_trainer_builds_the_offline_trainer(tmp_path, pendulum, monkeypatch):
    import tdrl.train._offline as offline

    monkeypatch.setattr(offline, "open_dataset", lambda spec, batch_size, root=None: pendulum)
    config = _config("iql", "dataset='minari:x-v0'")
    assert isinstance(make_trainer(config, tmp_path, quiet=True), OfflineTrainer)


def test_evaluations_and_checkpoints_come_when_due_between_rows(tmp_path, pendulum):
    config = _config(
        "iql", "updates=30", "eval.every_updates=15", "logging.checkpoint_every_updates=25"
    )
    OfflineTrainer(config, tmp_path, dataset=pendulum, quiet=True).run()
    rows = _rows(tmp_path)
    assert [int(r["updates"]) for r in rows] == [10, 15, 20, 25, 30]
    assert [int(r["updates"]) for r in rows if r["eval_return"]] == [15, 30]
    ckpts = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "checkpoints").iterdir())
    assert ckpts == [25, 30]


def test_discrete_bc_is_the_policy_log_likelihood_of_int64_one_hot_actions(tmp_path):
    # the built-in CartPole's one-hot actions are int64: BCLoss alone reads int64 as class
    # indices and scored the sampled action (it crashed in log_softmax of a long tensor)
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(4,))
    data = _data(env, 30, "CartPole-v1")
    trainer = OfflineTrainer(
        _config("bc", "updates=4", "eval.every_updates=0"),
        tmp_path / "bc",
        dataset=data,
        quiet=True,
    )
    batch = trainer.data.sample()
    assert batch["action"].dtype == torch.int64
    loss = trainer.agent.loss(batch)["loss_bc"]
    logits = trainer.policy.module[0](batch.select("observation").clone())["logits"]
    expected = -(torch.log_softmax(logits, -1) * batch["action"]).sum(-1).mean()
    torch.testing.assert_close(loss, expected)
    assert trainer.run()["updates"] == 4


def test_td3bc_normalises_observations_with_the_dataset_statistics(tmp_path, pendulum):
    # the TD3+BC paper's state normalisation, on batches and at evaluation, kept in config.json
    obs = pendulum[:]["observation"].double()
    loc, scale = obs.mean(0), obs.std(0, unbiased=False) + 1e-3
    trainer = OfflineTrainer(_config("td3bc"), tmp_path, dataset=pendulum, quiet=True)
    saved = trainer.config["data"]  # config.json's
    assert saved["normalize_observations"] is True
    assert torch.allclose(torch.tensor(saved["observation_loc"]).double(), loc, atol=1e-5)
    assert torch.allclose(torch.tensor(saved["observation_scale"]).double(), scale, atol=1e-5)
    batch = trainer.data.sample(64)
    for key in ("observation", ("next", "observation")):
        raw = batch[key].double() * scale + loc  # back to the env's: cos^2 + sin^2 = 1
        assert torch.allclose(raw[:, 0] ** 2 + raw[:, 1] ** 2, torch.ones(64).double(), atol=1e-4)
        assert not torch.allclose(batch[key][:, 0] ** 2 + batch[key][:, 1] ** 2, torch.ones(64))
    seen, policy = [], trainer.policy
    trainer.policy = lambda td: (seen.append(td["observation"].clone()), policy(td))[1]
    trainer.episode_returns(PendulumV1Env(batch_size=(2,)))
    raw = torch.cat(seen).double() * scale + loc
    assert torch.allclose(raw[:, 0] ** 2 + raw[:, 1] ** 2, torch.ones(len(raw)).double(), atol=1e-4)


def test_resume_and_eval_reuse_the_saved_observation_statistics(tmp_path, pendulum):
    config = _config("td3bc", "updates=10", "eval.every_updates=10")
    OfflineTrainer(config, tmp_path, dataset=pendulum, quiet=True).run()
    saved = json.loads((tmp_path / "config.json").read_text())
    torch.manual_seed(1)  # another dataset: its statistics differ, the saved ones stay
    other = _data(PendulumV1Env(batch_size=(2,)), 30, "Pendulum-v1")
    again = OfflineTrainer(saved, tmp_path / "again", dataset=other, quiet=True)
    assert again._obs_norm[0].tolist() == saved["data"]["observation_loc"]
    assert again._obs_norm[1].tolist() == saved["data"]["observation_scale"]
    fresh = OfflineTrainer(_config("td3bc"), tmp_path / "fresh", dataset=other, quiet=True)
    assert fresh._obs_norm[0].tolist() != saved["data"]["observation_loc"]


def test_observation_normalisation_is_off_for_cql_and_refused_with_fine_tuning(tmp_path, pendulum):
    trainer = OfflineTrainer(_config("cql"), tmp_path, dataset=pendulum, quiet=True)
    assert trainer._obs_norm is None and trainer.data.observation_norm is None
    config = _config("iql", "online_frames=10")
    config["data"] = {"normalize_observations": True}
    with pytest.raises(ValueError, match="normalize_observations does not combine"):
        OfflineTrainer(config, tmp_path / "ft", dataset=pendulum, quiet=True)
