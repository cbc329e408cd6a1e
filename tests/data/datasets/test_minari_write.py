"""write_minari_dataset: Minari's own reader gets back every value written, as from DataCollector."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data.datasets import minari_dataset_path, write_minari_dataset

minari = pytest.importorskip("minari")
gym = pytest.importorskip("gymnasium")


@pytest.fixture(autouse=True)
def datasets_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def _episode(obs, actions, rewards, terminated, truncated=None):
    """A TorchRL-layout episode from T + 1 observations (a tensor or a dict of tensors)."""

    def split(o):
        if isinstance(o, dict):
            pairs = {k: split(v) for k, v in o.items()}
            return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
        return o[:-1].clone(), o[1:].clone()

    now, nxt = split(obs)
    t = rewards.shape[0]
    nexts = {"observation": nxt, "reward": rewards.reshape(t, 1)}
    nexts["terminated"] = torch.as_tensor(terminated).reshape(t, 1)
    if truncated is not None:
        nexts["truncated"] = torch.as_tensor(truncated).reshape(t, 1)
    return TensorDict({"observation": now, "action": actions, "next": nexts}, [t])


def _pendulum_episode(t, seed, end="truncated"):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(t + 1, 3, generator=g)
    actions = torch.rand(t, 1, generator=g) * 4 - 2
    rewards = -torch.rand(t, generator=g)
    flags = torch.zeros(t, dtype=torch.bool)
    if end == "terminated":
        return _episode(
            obs, actions, rewards, flags.clone().index_fill_(0, torch.tensor(t - 1), True)
        )
    trunc = flags.clone()
    if end == "truncated":
        trunc[-1] = True
    return _episode(obs, actions, rewards, flags, trunc)


def test_load_dataset_reads_every_value_of_box_episodes():
    eps = [_pendulum_episode(5, 0), _pendulum_episode(3, 1, end="terminated")]
    path = write_minari_dataset(
        "pendulum/mine-v0", eps, env_id="Pendulum-v1", algorithm_name="sac", author="me"
    )
    assert path == minari_dataset_path("pendulum/mine-v0")
    ds = minari.load_dataset("pendulum/mine-v0")
    assert ds.total_episodes == 2 and ds.total_steps == 8
    assert ds.spec.env_spec.id == "Pendulum-v1"
    assert ds.recover_environment().spec.id == "Pendulum-v1"
    assert ds.observation_space == gym.make("Pendulum-v1").observation_space
    got = list(ds.iterate_episodes())
    for ep, src in zip(got, eps, strict=True):
        obs = torch.cat([src["observation"], src["next", "observation"][-1:]]).numpy()
        np.testing.assert_array_equal(ep.observations, obs)
        assert ep.observations.dtype == np.float32
        np.testing.assert_array_equal(ep.actions, src["action"].numpy())
        np.testing.assert_array_equal(
            ep.rewards, src["next", "reward"].reshape(-1).double().numpy()
        )
        np.testing.assert_array_equal(
            ep.terminations, src["next", "terminated"].reshape(-1).numpy()
        )
    assert got[0].truncations.tolist() == [False] * 4 + [True]
    assert got[1].terminations.tolist() == [False, False, True]
    assert got[1].truncations.tolist() == [False] * 3
    meta = json.loads((path / "data" / "metadata.json").read_text())
    assert meta["algorithm_name"] == "sac" and meta["author"] == ["me"]
    assert (path.parent / "namespace_metadata.json").read_text() == "{}"


def test_unfinished_last_step_is_stored_truncated():
    write_minari_dataset("cut-v0", [_pendulum_episode(4, 2, end=None)], env_id="Pendulum-v1")
    ep = next(minari.load_dataset("cut-v0").iterate_episodes())
    assert ep.truncations.tolist() == [False, False, False, True]
    assert not ep.terminations.any()


@pytest.mark.parametrize("encoding", ["onehot", "index", "index1"])
def test_discrete_actions_are_stored_as_indices(encoding):
    idx = torch.tensor([0, 1, 1, 0])
    action = {
        "onehot": torch.nn.functional.one_hot(idx, 2),
        "index": idx,
        "index1": idx.unsqueeze(-1),
    }[encoding]
    obs = torch.arange(20, dtype=torch.float32).reshape(5, 4) / 100
    ep = _episode(obs, action, torch.ones(4), torch.tensor([False, False, False, True]))
    write_minari_dataset("cp/disc-v1", [ep], env_id="CartPole-v1")
    ds = minari.load_dataset("cp/disc-v1")
    got = next(ds.iterate_episodes())
    assert got.actions.dtype == np.int64
    assert got.actions.tolist() == [0, 1, 1, 0]
    np.testing.assert_array_equal(got.observations, obs.numpy())
    assert isinstance(ds.action_space, gym.spaces.Discrete)


def test_dict_observations_become_dict_space_groups():
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-5, 5, (2,), np.float32),
            "goal": gym.spaces.Dict({"id": gym.spaces.Discrete(3)}),
        }
    )
    act = gym.spaces.Box(-1, 1, (1,), np.float32)
    obs = {"pos": torch.randn(4, 2), "goal": {"id": torch.tensor([0, 2, 1, 1])}}
    ep = _episode(obs, torch.zeros(3, 1), torch.arange(3.0), torch.tensor([False, False, True]))
    write_minari_dataset("dict-v0", [ep], env_id=None, observation_space=space, action_space=act)
    ds = minari.load_dataset("dict-v0")
    assert ds.observation_space == space and ds.spec.env_spec is None
    got = next(ds.iterate_episodes())
    np.testing.assert_array_equal(got.observations["pos"], obs["pos"].numpy())
    assert got.observations["goal"]["id"].tolist() == [0, 2, 1, 1]
    np.testing.assert_array_equal(got.rewards, [0.0, 1.0, 2.0])


def test_dicts_of_numpy_arrays_are_episodes():
    ep = _pendulum_episode(3, 4).to_dict()
    ep = {
        k: {kk: vv.numpy() for kk, vv in v.items()} if isinstance(v, dict) else v.numpy()
        for k, v in ep.items()
    }
    write_minari_dataset("np-v0", [ep], env_id="Pendulum-v1")
    got = next(minari.load_dataset("np-v0").iterate_episodes())
    np.testing.assert_array_equal(got.actions, ep["action"])


def test_same_files_as_minari_data_collector(datasets_dir):
    """DataCollector on seeded CartPole, and the same transitions through the writer."""
    pytest.importorskip("jax")
    env = minari.DataCollector(gym.make("CartPole-v1", max_episode_steps=30))
    rng = np.random.default_rng(0)
    eps, rows = [], None
    obs, _ = env.reset(seed=3)
    rows = {"o": [obs], "a": [], "r": [], "te": [], "tr": []}
    while len(eps) < 3:
        a = int(rng.integers(2))
        obs, r, te, tr, _ = env.step(a)
        for k, v in zip(("o", "a", "r", "te", "tr"), (obs, a, r, te, tr)):
            rows[k].append(v)
        if te or tr:
            eps.append(rows)
            obs, _ = env.reset(seed=10 + len(eps))
            rows = {"o": [obs], "a": [], "r": [], "te": [], "tr": []}
    with pytest.warns(UserWarning):
        env.create_dataset("ref/cp-v0", algorithm_name="random", author="me")
    env.close()
    episodes = [
        _episode(
            torch.tensor(np.stack(e["o"])),
            torch.nn.functional.one_hot(torch.tensor(e["a"]), 2),
            torch.tensor(e["r"]),
            torch.tensor(e["te"]),
            torch.tensor(e["tr"]),
        )
        for e in eps
    ]
    write_minari_dataset(
        "ref/mine-v0", episodes, env_id="CartPole-v1", algorithm_name="random", author="me"
    )
    ref, mine = minari.load_dataset("ref/cp-v0"), minari.load_dataset("ref/mine-v0")
    assert (mine.total_episodes, mine.total_steps) == (ref.total_episodes, ref.total_steps)
    assert mine.observation_space == ref.observation_space
    assert mine.action_space == ref.action_space
    assert mine.spec.env_spec.id == ref.spec.env_spec.id
    for a, b in zip(ref.iterate_episodes(), mine.iterate_episodes(), strict=True):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            x, y = getattr(a, field), getattr(b, field)
            assert x.dtype == y.dtype and x.shape == y.shape, field
            np.testing.assert_array_equal(x, y)
    import h5py

    def layout(dataset_id):
        out = {}
        with h5py.File(minari_dataset_path(dataset_id) / "data" / "main_data.hdf5") as f:
            f.visititems(
                lambda n, o: out.__setitem__(n, (type(o).__name__, getattr(o, "dtype", None)))
            )
            attrs = {k: sorted(set(f[k].attrs) - {"seed"}) for k in f}
            stats = {k: {a: f[k].attrs[a] for a in attrs[k] if a != "id"} for k in f}
        return out, attrs, stats

    assert layout("ref/mine-v0") == layout("ref/cp-v0")
    ref_meta = json.loads((minari_dataset_path("ref/cp-v0") / "data/metadata.json").read_text())
    my_meta = json.loads((minari_dataset_path("ref/mine-v0") / "data/metadata.json").read_text())
    assert set(ref_meta) == set(my_meta)
    for key in ("observation_space", "action_space", "total_steps", "author", "minari_version"):
        assert my_meta[key] == ref_meta[key], key
    assert json.loads(my_meta["env_spec"])["id"] == "CartPole-v1"
    assert (datasets_dir / "ref" / "namespace_metadata.json").exists()


def test_existing_id_is_refused_then_overwritten_or_appended():
    write_minari_dataset("p-v0", [_pendulum_episode(3, 0)], env_id="Pendulum-v1")
    with pytest.raises(FileExistsError, match=r"p-v0.*already exists.*overwrite=True"):
        write_minari_dataset("p-v0", [_pendulum_episode(2, 1)], env_id="Pendulum-v1")
    write_minari_dataset("p-v0", [_pendulum_episode(2, 1)], env_id="Pendulum-v1", overwrite=True)
    assert minari.load_dataset("p-v0").total_steps == 2
    second = _pendulum_episode(4, 2)
    write_minari_dataset(
        "p-v0", [second], env_id="Pendulum-v1", append=True, algorithm_name="random"
    )
    ds = minari.load_dataset("p-v0")
    assert (ds.total_episodes, ds.total_steps) == (2, 6)
    last = list(ds.iterate_episodes())[1]
    assert last.id == 1
    np.testing.assert_array_equal(last.actions, second["action"].numpy())
    meta = json.loads((minari_dataset_path("p-v0") / "data" / "metadata.json").read_text())
    assert meta["algorithm_name"] == "unknown + random"


def test_append_refuses_another_env():
    write_minari_dataset("q-v0", [_pendulum_episode(3, 0)], env_id="Pendulum-v1")
    obs = torch.zeros(3, 4)
    ep = _episode(obs, torch.tensor([0, 1]), torch.ones(2), torch.tensor([False, True]))
    with pytest.raises(ValueError, match=r"cannot append .*spaces or env differ"):
        write_minari_dataset("q-v0", [ep], env_id="CartPole-v1", append=True)
    assert minari.load_dataset("q-v0").total_steps == 3


def test_failed_write_leaves_nothing(datasets_dir):
    bad = _pendulum_episode(3, 0)
    bad["action"] = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"episode 1's 'action' does not fit the space.*\(3, 1\)"):
        write_minari_dataset("ns/bad-v0", [_pendulum_episode(2, 0), bad], env_id="Pendulum-v1")
    assert sorted(os.listdir(datasets_dir / "ns")) == []


def test_failed_overwrite_keeps_the_old_dataset():
    write_minari_dataset("keep-v0", [_pendulum_episode(3, 0)], env_id="Pendulum-v1")
    with pytest.raises(ValueError, match="no episode to write"):
        write_minari_dataset("keep-v0", [], env_id="Pendulum-v1", overwrite=True)
    assert minari.load_dataset("keep-v0").total_steps == 3


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (
            lambda td: td["next", "terminated"].index_fill_(0, torch.tensor(1), True),
            "ends at step 1",
        ),
        (lambda td: td["observation"].index_fill_(0, torch.tensor(2), 9.0), "not contiguous"),
        (lambda td: td["next"].pop("reward"), r"no entry \('next', 'reward'\)"),
    ],
)
def test_bad_episodes_are_named(mutate, match):
    td = _pendulum_episode(4, 0)
    mutate(td)
    with pytest.raises((ValueError, KeyError), match=f"episode 0.*{match}|{match}"):
        write_minari_dataset("bad-v0", [td], env_id="Pendulum-v1")


def test_bad_ids_and_envs():
    with pytest.raises(ValueError, match="malformed dataset id"):
        write_minari_dataset("../x-v0", [], env_id="Pendulum-v1")
    with pytest.raises(ValueError, match=r"unknown gymnasium env id.*'Nope-v9'"):
        write_minari_dataset(
            "x-v0",
            [],
            env_id="Nope-v9",
            observation_space=gym.spaces.Box(-1, 1, (1,)),
            action_space=gym.spaces.Discrete(2),
        )
    with pytest.raises(ValueError, match="no spaces"):
        write_minari_dataset("x-v0", [], env_id=None)
    with pytest.raises(ValueError, match="exclusive"):
        write_minari_dataset("x-v0", [], env_id="Pendulum-v1", overwrite=True, append=True)


def test_explicit_root(tmp_path, datasets_dir):
    root = tmp_path / "elsewhere"
    path = write_minari_dataset("r-v0", [_pendulum_episode(2, 0)], env_id="Pendulum-v1", root=root)
    assert path == root / "r-v0" and not datasets_dir.joinpath("r-v0").exists()
    assert minari.MinariDataset(path / "data").total_steps == 2
