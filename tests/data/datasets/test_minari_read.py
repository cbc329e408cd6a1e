"""MinariExperienceReplay: datasets made with Minari's own DataCollector, read value for value."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

minari = pytest.importorskip("minari")

from tdrl.data import SliceSampler  # noqa: E402
from tdrl.data.datasets import MinariExperienceReplay  # noqa: E402
from tdrl.errors import CheckpointError  # noqa: E402
from tdrl.specs import Bounded, Categorical, Composite  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class DictObsEnv(gym.Env):
    """Nested Dict observations (float and int leaves), a Box action, infos; ends after 4 steps."""

    observation_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1, 1, (2,), np.float32),
            "inner": gym.spaces.Dict({"count": gym.spaces.Box(0, 100, (1,), np.int64)}),
        }
    )
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"dist": np.float64(0.0)}

    def _obs(self):
        pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"pos": pos, "inner": {"count": np.array([self.t], np.int64)}}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action[0]), self.t >= 4, False, {"dist": np.float64(self.t)}


if "TdrlDictObs-v0" not in gym.registry:
    gym.register("TdrlDictObs-v0", entry_point=f"{__name__}:DictObsEnv", max_episode_steps=10)

ENVS = {
    "cartpole": lambda: gym.make("CartPole-v1", max_episode_steps=8),
    "pendulum": lambda: gym.make("Pendulum-v1", max_episode_steps=5),
    "dict": lambda: gym.make("TdrlDictObs-v0"),
}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Minari's cache and the default tdrl root both live in tmp_path."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def collect(name: str, dataset_id: str, episodes: int = 3, seed: int = 0):
    env = minari.DataCollector(ENVS[name](), record_infos=name == "dict")
    env.action_space.seed(seed)
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        while True:
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                break
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return env.create_dataset(dataset_id=dataset_id, algorithm_name="random")


def _rows(value, t):
    if isinstance(value, dict):
        return {k: _rows(v, t) for k, v in value.items()}
    return torch.as_tensor(np.asarray(value)[t])


def _assert_equal(got, want, what):
    if isinstance(want, dict):
        assert sorted(got.keys()) == sorted(want), what
        for k in want:
            _assert_equal(got[k], want[k], f"{what}/{k}")
        return
    assert got.dtype == want.dtype, what
    assert torch.equal(got, want), what


def assert_matches_minari(data, dataset_id):
    """Every stored value against a plain loop over minari.load_dataset's episodes."""
    episodes = list(minari.load_dataset(dataset_id).iterate_episodes())
    assert len(data) == sum(len(ep.rewards) for ep in episodes)
    row = 0
    for ep in sorted(episodes, key=lambda e: e.id):
        for t in range(len(ep.rewards)):
            got = data[row].to_dict()
            assert int(got["episode"]) == ep.id
            _assert_equal(got["observation"], _rows(ep.observations, t), "observation")
            _assert_equal(got["next"]["observation"], _rows(ep.observations, t + 1), "next obs")
            _assert_equal(got["action"], _rows(ep.actions, t), "action")
            term, trunc = bool(ep.terminations[t]), bool(ep.truncations[t])
            assert got["next"]["reward"].tolist() == [float(ep.rewards[t])]
            assert got["next"]["reward"].dtype == torch.float64
            assert got["next"]["terminated"].tolist() == [term]
            assert got["next"]["truncated"].tolist() == [trunc]
            assert got["next"]["done"].tolist() == [term or trunc]
            if ep.infos:
                _assert_equal(got["info"], _rows(ep.infos, t), "info")
                _assert_equal(got["next"]["info"], _rows(ep.infos, t + 1), "next info")
            else:
                assert "info" not in got
            row += 1


@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("local", [True, False])
def test_every_value_equals_minari(tmp_path, name, local):
    collect(name, f"test/{name}/random-v0")
    data = MinariExperienceReplay(
        f"test/{name}/random-v0", batch_size=4, root=tmp_path / "tdrl", load_from_local_minari=local
    )
    assert_matches_minari(data, f"test/{name}/random-v0")
    assert data.dataset_root == tmp_path / "tdrl" / "test" / name / "random-v0"
    assert data.sample()["next", "done"].shape == (4, 1)


def test_nested_dict_observations_stay_nested(tmp_path):
    collect("dict", "test/dict/nested-v0")
    data = MinariExperienceReplay("test/dict/nested-v0", batch_size=2, root=tmp_path / "tdrl")
    keys = set(data[:].keys(include_nested=True, leaves_only=True))
    assert ("observation", "inner", "count") in keys
    assert ("next", "observation", "pos") in keys
    assert isinstance(data.metadata["observation_space"], Composite)
    assert data.metadata["observation_space"]["inner", "count"].dtype == torch.int64


def test_metadata_env_id_and_specs(tmp_path):
    collect("cartpole", "test/cartpole/meta-v0")
    data = MinariExperienceReplay("test/cartpole/meta-v0", batch_size=2, root=tmp_path)
    assert data.env_id == "CartPole-v1"
    assert data.metadata["total_steps"] == len(data)
    assert data.metadata["total_episodes"] == 3
    assert data.metadata["dataset_id"] == "test/cartpole/meta-v0"
    assert data.metadata["env_spec"]["max_episode_steps"] == 8
    action = data.metadata["action_space"]
    assert isinstance(action, Categorical) and action.n == 2
    obs = data.metadata["observation_space"]
    assert isinstance(obs, Bounded) and obs.shape == (4,)


def test_default_root_is_under_the_user_cache(tmp_path):
    collect("pendulum", "test/pendulum/home-v0")
    data = MinariExperienceReplay("test/pendulum/home-v0", batch_size=2)
    want = tmp_path / "home" / ".cache" / "tdrl" / "minari" / "test" / "pendulum" / "home-v0"
    assert data.dataset_root == want and want.is_dir()


def _forbid_minari(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("minari was called on a cached open")

    monkeypatch.setattr(minari, "load_dataset", refuse)
    monkeypatch.setattr(minari, "download_dataset", refuse)


@pytest.mark.parametrize("local", [True, False])
def test_second_open_maps_the_cache(tmp_path, monkeypatch, local):
    collect("pendulum", "test/pendulum/cache-v0")
    kw = dict(batch_size=2, root=tmp_path / "tdrl", load_from_local_minari=local)
    first = MinariExperienceReplay("test/pendulum/cache-v0", **kw)[:]
    _forbid_minari(monkeypatch)
    again = MinariExperienceReplay("test/pendulum/cache-v0", **kw)
    assert (again[:] == first).all()
    assert again.env_id == "Pendulum-v1"


def test_force_converts_again(tmp_path, monkeypatch):
    collect("pendulum", "test/pendulum/force-v0")
    MinariExperienceReplay("test/pendulum/force-v0", batch_size=2, root=tmp_path)
    calls = []
    load = minari.load_dataset
    monkeypatch.setattr(minari, "load_dataset", lambda *a, **k: calls.append(a) or load(*a, **k))
    MinariExperienceReplay("test/pendulum/force-v0", batch_size=2, root=tmp_path, download="force")
    assert calls == [("test/pendulum/force-v0",)]


def test_local_dataset_made_again_is_converted_again(tmp_path):
    collect("pendulum", "test/pendulum/remake-v0", seed=0)
    kw = dict(batch_size=2, root=tmp_path / "tdrl", load_from_local_minari=True)
    before = MinariExperienceReplay("test/pendulum/remake-v0", **kw)[:]
    minari.delete_dataset("test/pendulum/remake-v0")
    collect("pendulum", "test/pendulum/remake-v0", seed=10)
    data = MinariExperienceReplay("test/pendulum/remake-v0", **kw)
    assert not torch.equal(data[:]["observation"], before["observation"])
    assert_matches_minari(data, "test/pendulum/remake-v0")


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_crash_mid_conversion_leaves_no_dataset(tmp_path, monkeypatch):
    from tdrl.data.datasets import _common, _minari_convert

    collect("cartpole", "test/cartpole/crash-v0")
    real_episode = _minari_convert._episode
    seen = []

    def crash_on_second(ep):
        seen.append(ep.id)
        if len(seen) == 2:
            raise RuntimeError("killed mid-conversion")
        return real_episode(ep)

    monkeypatch.setattr(_minari_convert, "_episode", crash_on_second)
    root = tmp_path / "tdrl"
    with pytest.raises(CheckpointError, match="killed mid-conversion"):
        MinariExperienceReplay("test/cartpole/crash-v0", batch_size=2, root=root)
    assert _leftovers(root) == []
    monkeypatch.undo()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))

    real_write = _common.write_tree

    def crash_while_writing(directory, tree, extra_json=None):
        real_write(directory, {"data": {}}, None)  # a partial folder, then the crash
        raise OSError("disk full")

    monkeypatch.setattr(_common, "write_tree", crash_while_writing)
    with pytest.raises(OSError, match="disk full"):
        MinariExperienceReplay("test/cartpole/crash-v0", batch_size=2, root=root)
    assert not (root / "test" / "cartpole" / "crash-v0").exists()
    assert [p for p in _leftovers(root) if "crash-v0" in p] == []
    monkeypatch.setattr(_common, "write_tree", real_write)
    data = MinariExperienceReplay("test/cartpole/crash-v0", batch_size=2, root=root)
    assert_matches_minari(data, "test/cartpole/crash-v0")


def _assert_missing_message(err, tmp_path, dataset_id):
    text = str(err.value)
    assert repr(dataset_id) in text
    assert str(tmp_path / "tdrl" / dataset_id) in text
    assert str(tmp_path / "minari" / dataset_id) in text
    for remedy in ("DataCollector", "tdrl dataset collect", "MINARI_DATASETS_PATH"):
        assert remedy in text


@pytest.mark.parametrize("kw", [{"download": False}, {"load_from_local_minari": True}])
def test_missing_dataset_names_id_places_and_remedy(tmp_path, kw):
    with pytest.raises(FileNotFoundError) as err:
        MinariExperienceReplay("nobody/made/this-v0", batch_size=2, root=tmp_path / "tdrl", **kw)
    _assert_missing_message(err, tmp_path, "nobody/made/this-v0")
    assert "download failed" not in str(err.value)


def test_failed_download_names_id_places_and_reason(tmp_path, monkeypatch):
    def offline(dataset_id, force_download=False):
        raise ConnectionError("no network")

    monkeypatch.setattr(minari, "download_dataset", offline)
    with pytest.raises(FileNotFoundError) as err:
        MinariExperienceReplay("mujoco/hopper/expert-v0", batch_size=2, root=tmp_path / "tdrl")
    _assert_missing_message(err, tmp_path, "mujoco/hopper/expert-v0")
    assert "download failed (ConnectionError: no network)" in str(err.value)
    assert isinstance(err.value.__cause__, ConnectionError)
    assert _leftovers(tmp_path / "tdrl") == []


def test_truncated_minari_file_names_it_and_writes_nothing(tmp_path):
    collect("pendulum", "test/pendulum/cut-v0")
    file = tmp_path / "minari" / "test" / "pendulum" / "cut-v0" / "data" / "main_data.hdf5"
    raw = file.read_bytes()
    file.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match=str(file)):
        MinariExperienceReplay("test/pendulum/cut-v0", batch_size=2, root=tmp_path / "tdrl")
    assert _leftovers(tmp_path / "tdrl") == []


@pytest.mark.parametrize("bad", ["../escape", "/abs/id-v0", "a//b", ""])
def test_invalid_ids_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="invalid dataset_id"):
        MinariExperienceReplay(bad, batch_size=2, root=tmp_path)


def test_slice_sampler_returns_contiguous_same_episode_slices(tmp_path):
    collect("cartpole", "test/cartpole/slices-v0", episodes=4)
    data = MinariExperienceReplay(
        "test/cartpole/slices-v0",
        batch_size=12,
        root=tmp_path,
        sampler=SliceSampler(slice_len=3, traj_key="episode"),
    )
    for _ in range(5):
        batch = data.sample().reshape(4, 3)
        episode = batch["episode"]
        assert (episode == episode[:, :1]).all()
        assert torch.equal(batch["next", "observation"][:, :-1], batch["observation"][:, 1:])
        index = batch["index"]
        assert (index[:, 1:] - index[:, :-1] == 1).all()


def test_split_trajs_pads_one_row_per_episode(tmp_path):
    collect("cartpole", "test/cartpole/split-v0")
    flat = MinariExperienceReplay("test/cartpole/split-v0", batch_size=2, root=tmp_path)[:]
    data = MinariExperienceReplay(
        "test/cartpole/split-v0", batch_size=2, root=tmp_path, split_trajs=True
    )
    assert data.dataset_root == tmp_path / "test" / "cartpole" / "split-v0_split"
    rows = data[:]
    lengths = torch.bincount(flat["episode"])
    assert rows.batch_size == (3, int(lengths.max()))
    assert rows["mask"].sum(-1).tolist() == lengths.tolist()
    for i in range(3):
        n = int(lengths[i])
        assert torch.equal(rows["observation"][i, :n], flat["observation"][flat["episode"] == i])
        assert (rows["observation"][i, n:] == 0).all()
        assert (rows["traj_ids"][i, :n] == i).all()


def test_dataset_is_read_only(tmp_path):
    collect("pendulum", "test/pendulum/ro-v0")
    data = MinariExperienceReplay("test/pendulum/ro-v0", batch_size=2, root=tmp_path)
    with pytest.raises(RuntimeError, match="read-only"):
        data.extend(data[:2])


def test_available_datasets_lists_the_local_cache():
    collect("pendulum", "test/pendulum/listed-v0")
    assert "test/pendulum/listed-v0" in MinariExperienceReplay.available_datasets
