"""Offline dataset benchmarks (issue 24): opening a dataset and sampling from it, tdrl beside a
plain ``h5py``/numpy loop over the same file.

Groups (each ``tdrl`` beside ``plain``):

- ``d4rl open`` / ``minari open``: the first open. ``tdrl`` converts the file into its
  memory-mapped cache (a fresh root each round: ``D4RLExperienceReplay(path, root=...)``,
  ``MinariExperienceReplay(id, load_from_local_minari=True, root=...)``); ``plain`` reads every
  array with ``h5py`` (D4RL: the flat arrays; Minari: a loop over the episode groups) and builds
  the same columns as torch tensors in memory (next observations, done flags).
- ``d4rl reopen`` / ``minari reopen``: opening the same dataset again. ``tdrl`` maps its cache
  (no conversion); ``plain`` has no cache and reads the file again.
- ``sample``: one batch of 256 transitions. ``tdrl``: ``rb.sample()`` from the converted
  dataset (memory-mapped storage, random sampler, the whole TorchRL layout as a TensorDict);
  ``plain``: ``torch.randint`` and an ``index_select`` of each in-memory column.

The data: 200 episodes of 1,000 steps (200,000 transitions), 17 float32 observations, 6 float32
actions (HalfCheetah's sizes). Run::

    .venv/bin/python -m pytest benchmarks/test_datasets.py --benchmark-enable -p no:randomly
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data.datasets import D4RLExperienceReplay, MinariExperienceReplay, write_minari_dataset

EPISODES, STEPS, OBS, ACT, BATCH = 200, 1000, 17, 6, 256
DATASET_ID = "bench/cheetah-v0"
pytestmark = pytest.mark.benchmark(max_time=2.0, min_rounds=3, warmup=False)
_fresh = itertools.count()
# TorchRL's D4RL layout drops the file's last transition (its next step is not in the file).
D4RL_LEN = EPISODES * STEPS - 1


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = EPISODES * STEPS
    timeouts = np.zeros(n, dtype=bool)
    timeouts[STEPS - 1 :: STEPS] = True
    return {
        "observations": rng.standard_normal((n, OBS), dtype=np.float32),
        "next_observations": rng.standard_normal((n, OBS), dtype=np.float32),
        "actions": rng.uniform(-1, 1, (n, ACT)).astype(np.float32),
        "rewards": rng.standard_normal(n, dtype=np.float32),
        "terminals": np.zeros(n, dtype=bool),
        "timeouts": timeouts,
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A D4RL HDF5 file and a Minari dataset of the same transitions."""
    base = tmp_path_factory.mktemp("datasets")
    arrays = _arrays()
    d4rl = base / "cheetah.hdf5"
    with h5py.File(d4rl, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
    minari_root = base / "minari"
    os.environ["MINARI_DATASETS_PATH"] = str(minari_root)
    episodes = []
    for e in range(EPISODES):
        s = slice(e * STEPS, (e + 1) * STEPS)
        obs = torch.from_numpy(arrays["observations"][s])
        nxt = torch.cat([obs[1:], torch.from_numpy(arrays["next_observations"][s][-1:])])
        truncated = torch.zeros(STEPS, 1, dtype=torch.bool)
        truncated[-1] = True
        episodes.append(
            TensorDict(
                {
                    "observation": obs,
                    "action": torch.from_numpy(arrays["actions"][s]),
                    "next": {
                        "observation": nxt,
                        "reward": torch.from_numpy(arrays["rewards"][s]).unsqueeze(-1),
                        "terminated": torch.zeros(STEPS, 1, dtype=torch.bool),
                        "truncated": truncated,
                    },
                },
                batch_size=[STEPS],
            )
        )
    import gymnasium as gym

    box = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    write_minari_dataset(
        DATASET_ID,
        episodes,
        env_id=None,
        observation_space=box,
        action_space=gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32),
        root=minari_root,
    )
    return {"d4rl": d4rl, "base": base}


# ------------------------------------------------------------------------------- plain loops
def plain_d4rl(path: Path) -> dict[str, torch.Tensor]:
    """Reads a D4RL file into the columns the losses need, with h5py and numpy."""
    with h5py.File(path, "r") as f:
        a = {k: f[k][()] for k in f.keys()}
    done = a["terminals"] | a["timeouts"]
    next_observation = a["next_observations"]
    next_observation[done] = 0  # TorchRL's layout: unknown next states after a done are zeros
    return {
        "observation": torch.from_numpy(a["observations"]),
        "action": torch.from_numpy(a["actions"]),
        "next_observation": torch.from_numpy(next_observation),
        "reward": torch.from_numpy(a["rewards"]).unsqueeze(-1),
        "terminated": torch.from_numpy(a["terminals"]).unsqueeze(-1),
        "truncated": torch.from_numpy(a["timeouts"]).unsqueeze(-1),
        "done": torch.from_numpy(done).unsqueeze(-1),
    }


def plain_minari(root: Path) -> dict[str, torch.Tensor]:
    """Reads a Minari dataset's episode groups with h5py into the same columns."""
    path = root / "bench" / "cheetah-v0" / "data" / "main_data.hdf5"
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("o", "n", "a", "r", "te", "tr")}
    with h5py.File(path, "r") as f:
        for name in sorted(f.keys(), key=lambda k: int(k.split("_")[-1])):
            ep = f[name]
            obs = ep["observations"][()]
            cols["o"].append(obs[:-1])
            cols["n"].append(obs[1:])
            cols["a"].append(ep["actions"][()])
            cols["r"].append(ep["rewards"][()])
            cols["te"].append(ep["terminations"][()])
            cols["tr"].append(ep["truncations"][()])
    out = {k: torch.from_numpy(np.concatenate(v)) for k, v in cols.items()}
    done = out["te"] | out["tr"]
    return {
        "observation": out["o"],
        "action": out["a"],
        "next_observation": out["n"],
        "reward": out["r"].unsqueeze(-1),
        "terminated": out["te"].unsqueeze(-1),
        "truncated": out["tr"].unsqueeze(-1),
        "done": done.unsqueeze(-1),
    }


def plain_sample(columns: dict[str, torch.Tensor], generator: torch.Generator) -> dict:
    index = torch.randint(columns["observation"].shape[0], (BATCH,), generator=generator)
    return {k: v.index_select(0, index) for k, v in columns.items()}


# ----------------------------------------------------------------------------------- open
def _fresh_root(files: dict[str, Path]) -> Path:
    return files["base"] / f"cache-{next(_fresh)}"


@pytest.mark.benchmark(group="d4rl open")
def test_d4rl_open_tdrl(benchmark, files) -> None:
    rb = benchmark.pedantic(
        lambda: D4RLExperienceReplay(files["d4rl"], BATCH, root=_fresh_root(files)),
        rounds=3,
        iterations=1,
    )
    assert len(rb) == D4RL_LEN


@pytest.mark.benchmark(group="d4rl open")
def test_d4rl_open_plain(benchmark, files) -> None:
    cols = benchmark.pedantic(lambda: plain_d4rl(files["d4rl"]), rounds=3, iterations=1)
    assert cols["observation"].shape[0] == EPISODES * STEPS


@pytest.mark.benchmark(group="d4rl reopen")
def test_d4rl_reopen_tdrl(benchmark, files) -> None:
    root = _fresh_root(files)
    D4RLExperienceReplay(files["d4rl"], BATCH, root=root)
    rb = benchmark(lambda: D4RLExperienceReplay(files["d4rl"], BATCH, root=root))
    assert len(rb) == D4RL_LEN


@pytest.mark.benchmark(group="d4rl reopen")
def test_d4rl_reopen_plain(benchmark, files) -> None:
    cols = benchmark(lambda: plain_d4rl(files["d4rl"]))
    assert cols["observation"].shape[0] == EPISODES * STEPS


def _minari(files: dict[str, Path], root: Path) -> MinariExperienceReplay:
    return MinariExperienceReplay(DATASET_ID, BATCH, root=root, load_from_local_minari=True)


@pytest.mark.benchmark(group="minari open")
def test_minari_open_tdrl(benchmark, files) -> None:
    rb = benchmark.pedantic(lambda: _minari(files, _fresh_root(files)), rounds=3, iterations=1)
    assert len(rb) == EPISODES * STEPS


@pytest.mark.benchmark(group="minari open")
def test_minari_open_plain(benchmark, files) -> None:
    root = Path(os.environ["MINARI_DATASETS_PATH"])
    cols = benchmark.pedantic(lambda: plain_minari(root), rounds=3, iterations=1)
    assert cols["observation"].shape[0] == EPISODES * STEPS


@pytest.mark.benchmark(group="minari reopen")
def test_minari_reopen_tdrl(benchmark, files) -> None:
    root = _fresh_root(files)
    _minari(files, root)
    rb = benchmark(lambda: _minari(files, root))
    assert len(rb) == EPISODES * STEPS


@pytest.mark.benchmark(group="minari reopen")
def test_minari_reopen_plain(benchmark, files) -> None:
    root = Path(os.environ["MINARI_DATASETS_PATH"])
    cols = benchmark(lambda: plain_minari(root))
    assert cols["observation"].shape[0] == EPISODES * STEPS


# --------------------------------------------------------------------------------- sample
@pytest.mark.benchmark(group="sample", max_time=1.0, min_rounds=20, warmup=True)
def test_sample_tdrl(benchmark, files) -> None:
    rb = D4RLExperienceReplay(files["d4rl"], BATCH, root=_fresh_root(files))
    torch.manual_seed(0)
    batch = benchmark(rb.sample)
    assert batch.batch_size == torch.Size([BATCH])


@pytest.mark.benchmark(group="sample", max_time=1.0, min_rounds=20, warmup=True)
def test_sample_plain(benchmark, files) -> None:
    cols = plain_d4rl(files["d4rl"])
    g = torch.Generator().manual_seed(0)
    batch = benchmark(lambda: plain_sample(cols, g))
    assert batch["observation"].shape == (BATCH, OBS)


def test_plain_reads_what_tdrl_reads(files) -> None:
    """The plain loops build the same columns tdrl's loaders store (so the groups time the
    same work)."""
    cols = plain_d4rl(files["d4rl"])
    rb = D4RLExperienceReplay(files["d4rl"], BATCH, root=_fresh_root(files))
    data, n = rb[:], D4RL_LEN
    torch.testing.assert_close(data["observation"], cols["observation"][:n])
    torch.testing.assert_close(data["next", "observation"], cols["next_observation"][:n])
    torch.testing.assert_close(data["next", "reward"], cols["reward"][:n])
    torch.testing.assert_close(data["next", "done"], cols["done"][:n])
    mcols = plain_minari(Path(os.environ["MINARI_DATASETS_PATH"]))
    mdata = _minari(files, _fresh_root(files))[:]
    torch.testing.assert_close(mdata["observation"], mcols["observation"])
    torch.testing.assert_close(mdata["next", "observation"], mcols["next_observation"])
    torch.testing.assert_close(mdata["action"], mcols["action"])
    torch.testing.assert_close(mdata["next", "truncated"], mcols["truncated"])
