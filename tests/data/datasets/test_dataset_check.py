"""check_dataset_matches_env: a dataset against the env it is evaluated on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

h5py = pytest.importorskip("h5py")
pytest.importorskip("gymnasium")

from tdrl.data.datasets import D4RLExperienceReplay, check_dataset_matches_env  # noqa: E402
from tdrl.envs import GymEnv, PendulumEnv  # noqa: E402
from tdrl.errors import SpecError  # noqa: E402


def _pendulum_file(path, obs_dim=3, action_dtype=np.float32):
    n = 6
    with h5py.File(path, "w") as f:
        f["observations"] = np.zeros((n, obs_dim), np.float32)
        f["actions"] = np.zeros((n, 1), action_dtype)
        f["rewards"] = np.zeros(n, np.float32)
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = np.arange(n) == 3
    return str(path)


def test_matching_dataset_passes(tmp_path):
    data = D4RLExperienceReplay(_pendulum_file(tmp_path / "ok.hdf5"), 2, root=tmp_path / "c")
    check_dataset_matches_env(data, GymEnv("Pendulum-v1"))


def test_wrong_observation_shape_names_key_spec_and_data(tmp_path):
    data = D4RLExperienceReplay(
        _pendulum_file(tmp_path / "bad.hdf5", obs_dim=4), 2, root=tmp_path / "c"
    )
    with pytest.raises(SpecError) as err:
        check_dataset_matches_env(data, GymEnv("Pendulum-v1"))
    text = str(err.value)
    assert "'observation'" in text and "got shape (4,)" in text and "expected shape (3,)" in text


def test_wrong_action_dtype_is_reported(tmp_path):
    path = _pendulum_file(tmp_path / "f64.hdf5", action_dtype=np.float64)
    data = D4RLExperienceReplay(path, 2, root=tmp_path / "c")
    with pytest.raises(SpecError, match=r"'action'.*dtype torch.float64.*dtype torch.float32"):
        check_dataset_matches_env(data, GymEnv("Pendulum-v1"))


def test_missing_key_lists_what_the_dataset_has():
    data = PendulumEnv().rollout(3).exclude("action")
    with pytest.raises(SpecError, match=r"no key 'action' \(got keys \["):
        check_dataset_matches_env(data, PendulumEnv())


def test_discrete_index_against_one_hot_env_suggests_categorical():
    env_onehot = GymEnv("CartPole-v1")
    env_index = GymEnv("CartPole-v1", categorical_action_encoding=True)
    data = env_index.rollout(4)
    check_dataset_matches_env(data, env_index)
    with pytest.raises(SpecError, match="categorical_action_encoding=True"):
        check_dataset_matches_env(data, env_onehot)
    assert data["action"].dtype == torch.int64
