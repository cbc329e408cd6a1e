"""``tdrl dataset collect``: a Minari dataset from a trained run's policy, a random policy or
the run's replay buffer."""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data.replay._safe_io import read_json
from tdrl.errors import CheckpointError
from tdrl.modules import ExplorationType, set_exploration_type
from tdrl.train._builders import make_env
from tdrl.train._checkpoint import latest_checkpoint, load_latest, report_to_stderr

__all__ = [
    "POLICIES",
    "add_dataset_parser",
    "buffer_episodes",
    "collect_dataset",
    "collect_episodes",
    "dataset_env_id",
    "run_dataset_command",
]

POLICIES = ("deterministic", "explore", "random")
# tdrl's built-in envs with the dynamics, spaces and horizon of a gymnasium id (their docs)
_GYM_IDS = {"CartPole": "CartPole-v1", "Pendulum": "Pendulum-v1"}
_WHERE = "tdrl dataset collect"
_MAX_STEPS = 100_000


def dataset_env_id(env: str) -> str:
    """The gymnasium id a dataset of a run on ``env`` (a ``tdrl train --env`` value) records.

    Examples:
        >>> dataset_env_id("Pendulum"), dataset_env_id("gym:MountainCar-v0")
        ('Pendulum-v1', 'MountainCar-v0')
    """
    if env.startswith("gym:"):
        return env[4:]
    if env in _GYM_IDS:
        return _GYM_IDS[env]
    raise ValueError(
        f"{_WHERE}: the run's env has no gymnasium id (got {env!r}; expected one of "
        f"{sorted(_GYM_IDS)} or 'gym:<id>'). Minari datasets record a gymnasium env; collect "
        "from a run on one."
    )


def _load_run(run_dir: Path) -> tuple[dict[str, Any], Any, Path, dict[str, Any]]:
    """The run's config, a trainer with its newest checkpoint loaded, that checkpoint's path
    and counters (the trainer's own envs are single ones: collection builds its own)."""
    from tdrl.train.cli import make_trainer

    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(
            f"{_WHERE}: {run_dir} is not a run directory (got no {cfg_path.name}; expected the "
            "--out directory of a `tdrl train` run). Check the path."
        )
    config = read_json(cfg_path, _WHERE)
    if not isinstance(config, dict) or not isinstance(config.get("env"), str):
        raise CheckpointError(
            f"{_WHERE}: {cfg_path} is not a run config (got {str(config)[:60]!r}; expected an "
            "object with an 'env'). Pass the --out directory of a `tdrl train` run."
        )
    dataset_env_id(config["env"])  # fail before building anything
    trainer_cfg = {**config, "num_envs": 1, "env_processes": 0}
    trainer_cfg["eval"] = {**config.get("eval", {}), "episodes": 1}
    threads = torch.get_num_threads()
    try:  # building a trainer sets the process's thread count: the caller's stays
        with tempfile.TemporaryDirectory() as scratch:
            trainer = make_trainer(trainer_cfg, scratch, quiet=True)
    finally:
        torch.set_num_threads(threads)
    path, counters = load_latest(
        run_dir, where=_WHERE, report=report_to_stderr, modules=trainer.modules
    )
    return config, trainer, path, counters


def _policy(trainer: Any, counters: dict[str, Any], policy: str) -> tuple[Any, ExplorationType]:
    if policy == "deterministic":
        return trainer.policy, ExplorationType.DETERMINISTIC
    agent = getattr(trainer, "agent", None)
    exploration = getattr(agent, "exploration", None)
    if exploration is not None and counters.get("exploration") is not None:
        # e.g. DQN's annealed epsilon as the run left it
        exploration.load_state_dict(trainer._read_exploration(counters["exploration"]))
    return getattr(trainer, "collect_policy", trainer.policy), ExplorationType.RANDOM


def collect_episodes(
    run_dir: str | Path, *, episodes: int, policy: str = "deterministic", seed: int = 0
) -> list[TensorDictBase]:
    """``episodes`` episodes of a run's newest checkpoint's policy, in TorchRL's layout.

    ``policy``: ``"deterministic"`` (the policy's mode, as ``tdrl eval``), ``"explore"`` (the
    policy the run collected with: sampled actions, its exploration noise or epsilon) or
    ``"random"`` (actions drawn uniformly from the env's action spec). Up to 16 envs run
    side by side; episodes are taken in the order they end.

    Raises:
        FileNotFoundError: no run directory or no checkpoint.
        ValueError: a bad ``episodes``/``policy``, or a run env without a gymnasium id.
    """
    if policy not in POLICIES:
        raise ValueError(
            f"{_WHERE}: unknown policy (got {policy!r}; expected one of {POLICIES}). "
            "Pick one of them."
        )
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 1:
        raise ValueError(
            f"{_WHERE}: episodes must be an int >= 1 (got {episodes!r}). Pass --episodes N."
        )
    config, trainer, _, counters = _load_run(Path(run_dir))
    env = make_env(config["env"], min(episodes, 16), seed=seed, device=config.get("device", "cpu"))
    if policy == "random":
        actor, mode = env.rand_action, ExplorationType.RANDOM
    else:
        actor, mode = _policy(trainer, counters, policy)
    torch.manual_seed(seed)
    with torch.no_grad(), set_exploration_type(mode):
        return _rollout(env, actor, episodes)


def _rollout(env: Any, actor: Any, episodes: int) -> list[TensorDictBase]:
    keys = list(env.fake_tensordict().keys(True, True))
    n = env.batch_size.numel()
    steps: list[TensorDictBase] = []
    ends: list[tuple[int, int, int]] = []  # (last step, member, first step)
    start = [0] * n
    td = env.reset()
    for t in range(_MAX_STEPS):
        td = env.step(actor(td))
        steps.append(td.select(*keys).clone())
        for m in td.get(("next", "done")).reshape(n).nonzero().flatten().tolist():
            ends.append((t, m, start[m]))
            start[m] = t + 1
        if len(ends) >= episodes:
            break
        td = env.maybe_reset(env.step_mdp(td))
    else:
        raise RuntimeError(
            f"{_WHERE}: only {len(ends)} episodes ended in {_MAX_STEPS} steps of {n} envs (got "
            f"{len(ends)}; expected {episodes}). Use an env whose episodes end (a time limit)."
        )
    stacked = torch.stack(steps, dim=1)  # [n, T]
    return [stacked[m, s : e + 1].clone() for e, m, s in ends[:episodes]]


def buffer_episodes(run_dir: str | Path) -> list[TensorDictBase]:
    """The episodes in the replay buffer of a run's newest checkpoint, oldest first.

    Rows are put back in time order per env (the buffer holds each collected
    ``[num_envs, T]`` batch env-major, and a full buffer wraps around) and split at
    ``("next", "done")``; the first episode may have started before the oldest row kept,
    and an unfinished last one is stored truncated by the writer.

    Raises:
        FileNotFoundError: no run directory, no checkpoint, or a checkpoint without a buffer.
        ValueError: the run's trainer keeps no replay buffer (an on-policy algorithm).
    """
    run_dir = Path(run_dir)
    config, trainer, _, _ = _load_run(run_dir)
    if trainer.buffer is None:
        raise ValueError(
            f"{_WHERE}: the run {run_dir} keeps no replay buffer (got algorithm "
            f"{config.get('algorithm')!r}; expected an off-policy one: dqn, sac, td3, ddpg). "
            "Collect from its policy instead (drop --from-buffer)."
        )
    newest = latest_checkpoint(run_dir)
    if newest is not None and not (newest / "buffer").is_dir():
        raise FileNotFoundError(
            f"{_WHERE}: the checkpoint {newest} stores no replay buffer (got no "
            f"{newest / 'buffer'}; expected the buffer an off-policy run saves). Collect from "
            "the run's policy instead (drop --from-buffer)."
        )
    load_latest(run_dir, where=_WHERE, report=report_to_stderr, buffer=trainer.buffer, modules={})
    return _split_buffer(trainer.buffer, config)


def _split_buffer(buffer: Any, config: dict[str, Any]) -> list[TensorDictBase]:
    length = len(buffer)
    state = buffer.writer.state_dict()
    cursor, written = int(state["cursor"]), int(state.get("write_count", length))
    order = torch.arange(length)
    if written > length:  # wrapped: the oldest row kept is at the cursor
        order = torch.cat([torch.arange(cursor, length), torch.arange(0, cursor)])
    n_envs = int(config["num_envs"])
    block = n_envs * math.ceil(int(config["collector"]["frames_per_batch"]) / n_envs)
    skip = (-(written - length)) % block  # rows of a batch partly overwritten
    order = order[skip:]
    blocks = order.numel() // block
    if blocks == 0:
        return []
    data = buffer.storage.get(order[: blocks * block])
    per_env = data.reshape(blocks, n_envs, block // n_envs).transpose(0, 1).reshape(n_envs, -1)
    out: list[TensorDictBase] = []
    for e in range(n_envs):
        seq = per_env[e]
        ends = seq.get(("next", "done")).reshape(-1).nonzero().flatten().tolist()
        first = 0
        for last in [*ends, seq.batch_size[0] - 1]:
            if last >= first:
                out.append(seq[first : last + 1].clone())
            first = last + 1
    return out


def collect_dataset(
    run_dir: str | Path,
    *,
    episodes: int | None = None,
    out: str,
    policy: str = "deterministic",
    from_buffer: bool = False,
    seed: int = 0,
    root: str | Path | None = None,
    append: bool = False,
    overwrite: bool = False,
) -> Path:
    """Writes a Minari dataset ``out`` from a trained run; returns its folder.

    The episodes come from the run's policy (:func:`collect_episodes`) or, with
    ``from_buffer``, from its replay-buffer checkpoint (:func:`buffer_episodes`, a "replay"
    dataset; ``episodes`` then keeps only the last N). The dataset records the gymnasium id of
    the run's env (``env_spec``; tdrl's ``CartPole``/``Pendulum`` are ``CartPole-v1``/
    ``Pendulum-v1``) and tdrl's env name (``metadata["tdrl_env"]``). ``append=True`` adds the
    episodes to an existing dataset of the same env: a mixed dataset, e.g. expert episodes then
    random ones.

    Examples:
        >>> import tempfile
        >>> from tdrl.train import load_config
        >>> from tdrl.train._off_policy import OffPolicyTrainer
        >>> cfg = load_config("sac", overrides=["frames=100", "collector.init_random_frames=50",
        ...     "eval.every_frames=0", "eval.episodes=1", "model.hidden=[8]"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = OffPolicyTrainer(cfg, f"{d}/run", quiet=True).run()
        ...     path = collect_dataset(f"{d}/run", episodes=1, out="pendulum/doc-v0",
        ...                            policy="random", root=f"{d}/minari")
        ...     import minari
        ...     minari.MinariDataset(path / "data").total_steps
        200
    """
    from tdrl.data.datasets import write_minari_dataset

    run_dir = Path(run_dir)
    if from_buffer:
        if policy != "deterministic":
            raise ValueError(
                f"{_WHERE}: --from-buffer takes the stored transitions, not a policy (got "
                f"policy={policy!r}; expected the default). Drop --policy or --from-buffer."
            )
        eps = buffer_episodes(run_dir)
        if episodes is not None:
            eps = eps[-episodes:]
        source = "replay"
    else:
        if episodes is None:
            raise ValueError(
                f"{_WHERE}: how many episodes (got episodes=None; expected an int >= 1). "
                "Pass --episodes N."
            )
        eps = collect_episodes(run_dir, episodes=episodes, policy=policy, seed=seed)
        source = policy
    config = read_json(run_dir / "config.json", _WHERE)
    algorithm = "random" if source == "random" else f"tdrl-{config['algorithm']}-{source}"
    return write_minari_dataset(
        out,
        eps,
        env_id=dataset_env_id(config["env"]),
        root=root,
        algorithm_name=algorithm,
        description=f"{len(eps)} episodes ({source}) of the tdrl run {run_dir.name}",
        extra_metadata={"tdrl_env": config["env"]},
        overwrite=overwrite,
        append=append,
    )


def add_dataset_parser(sub: Any) -> None:
    """The ``tdrl dataset collect`` subcommand on the ``tdrl`` subparsers ``sub``."""
    ds = sub.add_parser(
        "dataset",
        help="make offline datasets",
        description="Make Minari datasets from trained runs.",
    )
    dsub = ds.add_subparsers(dest="dataset_command", required=True, metavar="{collect}")
    col = dsub.add_parser(
        "collect",
        help="write a Minari dataset from a run's policy or replay buffer",
        description="Roll out a trained run's policy (or a random one), or convert its "
        "replay-buffer checkpoint, into a Minari dataset that minari.load_dataset and "
        "`tdrl train iql --dataset minari:<id>` read. The dataset records the run's env.",
    )
    col.add_argument("run_dir", help="a run directory written by `tdrl train`")
    col.add_argument("--episodes", type=int, help="episodes to write (--from-buffer: the last N)")
    col.add_argument("--out", required=True, metavar="DATASET_ID", help="e.g. pendulum/sac-v0")
    col.add_argument(
        "--policy",
        choices=POLICIES,
        default="deterministic",
        help="the policy's mode, its exploration, or uniform random actions (default: "
        "deterministic)",
    )
    col.add_argument(
        "--from-buffer",
        action="store_true",
        help="convert the run's replay-buffer checkpoint instead (a replay dataset)",
    )
    col.add_argument("--seed", type=int, default=0, help="seed of the envs and the policy")
    col.add_argument(
        "--root", help="datasets folder (default: $MINARI_DATASETS_PATH or ~/.minari/datasets)"
    )
    col.add_argument(
        "--append", action="store_true", help="add the episodes to an existing dataset"
    )
    col.add_argument("--overwrite", action="store_true", help="replace an existing dataset")


def run_dataset_command(args: argparse.Namespace) -> int:
    """Runs ``tdrl dataset collect``; prints where the dataset is and how to train on it."""
    try:
        path = collect_dataset(
            args.run_dir,
            episodes=args.episodes,
            out=args.out,
            policy=args.policy,
            from_buffer=args.from_buffer,
            seed=args.seed,
            root=args.root,
            append=args.append,
            overwrite=args.overwrite,
        )
    except FileExistsError as err:
        print(f"{_WHERE}: error: {err} (here: --overwrite or --append)", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"{_WHERE}: error: {err}", file=sys.stderr)
        return 2
    print(f"dataset {args.out}: {path}")
    env = " MINARI_DATASETS_PATH=" + str(Path(args.root)) if args.root else ""
    print(f"train on it:{env} tdrl train iql --dataset minari:{args.out}")
    return 0
