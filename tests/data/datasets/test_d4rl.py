"""D4RLExperienceReplay: D4RL-layout HDF5 files read into TorchRL's layout, against a plain loop.

The expected values follow TorchRL 0.14.1's direct-download conversion
(``D4RLExperienceReplay._process_data_from_env`` then the zeroing of done next observations),
which was run on these same files and matched tdrl leaf for leaf (tdrl adds ``episode``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

h5py = pytest.importorskip("h5py")

from tdrl.data import SliceSampler  # noqa: E402
from tdrl.data.datasets import D4RLExperienceReplay  # noqa: E402
from tdrl.errors import CheckpointError  # noqa: E402

N = 12
TERMINAL, TIMEOUT = 4, 8  # row 4 terminates, row 8 times out


def write_d4rl(path: Path, *, next_obs: bool = False, infos: bool = True, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "observations": rng.normal(size=(N, 3)).astype(np.float32),
        "actions": rng.normal(size=(N, 2)).astype(np.float32),
        "rewards": rng.normal(size=(N,)).astype(np.float32),
        "terminals": np.arange(N) == TERMINAL,
        "timeouts": np.arange(N) == TIMEOUT,
    }
    if next_obs:
        arrays["next_observations"] = rng.normal(size=(N, 3)).astype(np.float32)
    if infos:
        arrays["infos/qpos"] = rng.normal(size=(N, 2))
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f[key] = value
        f["metadata/algorithm"] = "SAC"
        f["metadata/env_name"] = "Pendulum-v1"
        f["metadata/policy/fc0/weight"] = np.ones((2, 2))
    return arrays


def expected_rows(arrays: dict, use_truncated_as_done: bool) -> list[dict]:
    """TorchRL's layout by a plain loop: row i is the transition from step i (N - 1 rows)."""
    rows, episode = [], 0
    for i in range(N - 1):
        term, trunc = bool(arrays["terminals"][i]), bool(arrays["timeouts"][i])
        done = term or (trunc and use_truncated_as_done)
        nxt = (
            arrays["next_observations"][i]
            if "next_observations" in arrays
            else arrays["observations"][i + 1]
        )
        prev = i - 1
        rows.append(
            {
                "observation": arrays["observations"][i].tolist(),
                "action": arrays["actions"][i].tolist(),
                "next_observation": [0.0] * 3 if done else nxt.tolist(),
                "next_reward": float(arrays["rewards"][i]),
                "next_done": done,
                "next_terminated": term,
                "next_truncated": trunc,
                "reward": float(arrays["rewards"][prev]) if i else 0.0,
                "done": rows[prev]["next_done"] if i else False,
                "terminated": rows[prev]["next_terminated"] if i else False,
                "truncated": rows[prev]["next_truncated"] if i else False,
                "episode": episode,
                "info": arrays["infos/qpos"][i].tolist() if "infos/qpos" in arrays else None,
                "next_info": arrays["infos/qpos"][i + 1].tolist()
                if "infos/qpos" in arrays
                else None,
            }
        )
        episode += done
    return rows


def _scalar(t: torch.Tensor):
    return t.item() if t.numel() == 1 else t.tolist()


@pytest.mark.parametrize("next_obs", [False, True])
@pytest.mark.parametrize("use_truncated_as_done", [True, False])
def test_layout_and_values_match_torchrl_semantics(tmp_path, next_obs, use_truncated_as_done):
    arrays = write_d4rl(tmp_path / "toy.hdf5", next_obs=next_obs)
    data = D4RLExperienceReplay(
        str(tmp_path / "toy.hdf5"),
        batch_size=4,
        root=tmp_path / "cache",
        use_truncated_as_done=use_truncated_as_done,
    )
    td = data[:]
    assert len(data) == N - 1
    assert td["observation"].dtype == torch.float32 and td["next", "reward"].shape == (N - 1, 1)
    for flag in ("done", "terminated", "truncated"):
        assert td["next", flag].dtype == torch.bool and td[flag].shape == (N - 1, 1)
    assert td["episode"].dtype == torch.int64
    for i, want in enumerate(expected_rows(arrays, use_truncated_as_done)):
        got = {
            "observation": td["observation"][i].tolist(),
            "action": td["action"][i].tolist(),
            "next_observation": td["next", "observation"][i].tolist(),
            "next_reward": _scalar(td["next", "reward"][i]),
            "next_done": _scalar(td["next", "done"][i]),
            "next_terminated": _scalar(td["next", "terminated"][i]),
            "next_truncated": _scalar(td["next", "truncated"][i]),
            "reward": _scalar(td["reward"][i]),
            "done": _scalar(td["done"][i]),
            "terminated": _scalar(td["terminated"][i]),
            "truncated": _scalar(td["truncated"][i]),
            "episode": _scalar(td["episode"][i]),
            "info": td["info", "qpos"][i].tolist(),
            "next_info": td["next", "info", "qpos"][i].tolist(),
        }
        assert got == want, i


def test_metadata_and_env_id(tmp_path):
    write_d4rl(tmp_path / "toy.hdf5")
    data = D4RLExperienceReplay(str(tmp_path / "toy.hdf5"), 2, root=tmp_path / "cache")
    assert data.metadata["algorithm"] == "SAC"
    assert data.env_id == "Pendulum-v1"
    assert torch.equal(
        data.metadata["policy"]["fc0"]["weight"], torch.ones(2, 2, dtype=torch.float64)
    )
    assert "metadata" not in data[:].keys()


def test_id_is_looked_up_under_root(tmp_path):
    arrays = write_d4rl(tmp_path / "hopper-medium-v2.hdf5", infos=False)
    data = D4RLExperienceReplay("hopper-medium-v2", 2, root=tmp_path)
    assert data.dataset_root == tmp_path / "hopper-medium-v2"
    assert torch.equal(data[:]["action"], torch.from_numpy(arrays["actions"][:-1]))
    assert "info" not in data[:].keys()


def test_split_trajs_rows_end_done(tmp_path):
    arrays = write_d4rl(tmp_path / "toy.hdf5")
    data = D4RLExperienceReplay(
        str(tmp_path / "toy.hdf5"), 2, root=tmp_path / "c", split_trajs=True
    )
    rows = data[:]
    lengths = [TERMINAL + 1, TIMEOUT - TERMINAL, N - 1 - TIMEOUT - 1]
    assert rows.batch_size == (3, max(lengths))
    assert rows["mask"].sum(-1).tolist() == lengths
    assert rows["next", "done"][:, -1].all()
    assert torch.equal(rows["action"][1, : lengths[1]], torch.from_numpy(arrays["actions"][5:9]))
    assert (rows["traj_ids"][2, : lengths[2]] == 2).all()


def test_cached_open_reads_no_file_and_changes_reconvert(tmp_path, monkeypatch):
    from tdrl.data.datasets import _d4rl_convert

    path = tmp_path / "toy.hdf5"
    write_d4rl(path)
    first = D4RLExperienceReplay(str(path), 2, root=tmp_path / "c")[:]
    real = _d4rl_convert.read_d4rl_file
    calls = []
    monkeypatch.setattr(_d4rl_convert, "read_d4rl_file", lambda p: calls.append(p) or real(p))
    again = D4RLExperienceReplay(str(path), 2, root=tmp_path / "c")[:]
    assert calls == [] and (again == first).all()
    other = D4RLExperienceReplay(str(path), 2, root=tmp_path / "c", use_truncated_as_done=False)
    assert len(calls) == 1 and not other[:]["next", "done"][TIMEOUT]
    arrays = write_d4rl(path, seed=5)
    changed = D4RLExperienceReplay(str(path), 2, root=tmp_path / "c", use_truncated_as_done=False)
    assert len(calls) == 2
    assert torch.equal(changed[:]["observation"], torch.from_numpy(arrays["observations"][:-1]))


def _cache_files(root: Path) -> list[Path]:
    return list(root.rglob("*")) if root.exists() else []


def _cut(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)


def _drop_rewards(path: Path) -> None:
    with h5py.File(path, "a") as f:
        del f["rewards"]


@pytest.mark.parametrize("damage", [_cut, _garbage, _drop_rewards])
def test_damaged_file_raises_checkpoint_error_naming_it(tmp_path, damage):
    path = tmp_path / "toy.hdf5"
    write_d4rl(path)
    damage(path)
    with pytest.raises(CheckpointError, match=str(path)):
        D4RLExperienceReplay(str(path), 2, root=tmp_path / "c")
    assert _cache_files(tmp_path / "c") == [] or all(
        p.is_dir() for p in _cache_files(tmp_path / "c")
    )


def test_missing_field_message_lists_fields(tmp_path):
    path = tmp_path / "toy.hdf5"
    write_d4rl(path)
    _drop_rewards(path)
    with pytest.raises(CheckpointError, match=r"misses \['rewards'\]"):
        D4RLExperienceReplay(str(path), 2, root=tmp_path / "c")


def test_missing_dataset_names_id_paths_and_remedy(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        D4RLExperienceReplay("halfcheetah-medium-v2", 2, root=tmp_path)
    text = str(err.value)
    assert "'halfcheetah-medium-v2'" in text
    assert str(tmp_path / "halfcheetah-medium-v2.hdf5") in text
    assert str(tmp_path / "halfcheetah-medium-v2") in text
    assert "MinariExperienceReplay" in text and "pass its path" in text


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"from_env": True}, "from_env=True"),
        ({"direct_download": False}, "direct_download=False"),
        ({"terminate_on_end": False}, "terminate_on_end=False"),
        ({"frame_skip": 2}, "unexpected keyword"),
        ({"download": "sometimes"}, "invalid download"),
    ],
)
def test_unsupported_arguments_are_refused(tmp_path, kw, match):
    write_d4rl(tmp_path / "toy.hdf5")
    with pytest.raises((ValueError, TypeError), match=match):
        D4RLExperienceReplay(str(tmp_path / "toy.hdf5"), 2, root=tmp_path / "c", **kw)


def test_torchrl_positional_order(tmp_path):
    write_d4rl(tmp_path / "toy.hdf5")
    sampler = SliceSampler(slice_len=2, traj_key="episode")
    # dataset_id, batch_size, sampler, writer, collate_fn, pin_memory, prefetch, transform,
    # split_trajs, from_env, use_truncated_as_done (TorchRL's order)
    data = D4RLExperienceReplay(
        str(tmp_path / "toy.hdf5"),
        4,
        sampler,
        None,
        None,
        False,
        None,
        None,
        False,
        False,
        False,
        root=tmp_path / "c",
    )
    assert data.use_truncated_as_done is False and data._sampler is sampler


def test_slice_sampler_stays_inside_episodes(tmp_path):
    write_d4rl(tmp_path / "toy.hdf5")
    data = D4RLExperienceReplay(
        str(tmp_path / "toy.hdf5"),
        6,
        sampler=SliceSampler(slice_len=3, traj_key="episode"),
        root=tmp_path / "c",
    )
    for _ in range(5):
        batch = data.sample().reshape(2, 3)
        assert (batch["episode"] == batch["episode"][:, :1]).all()
        assert (batch["index"][:, 1:] - batch["index"][:, :-1] == 1).all()
