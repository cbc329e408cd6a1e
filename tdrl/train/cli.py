"""The ``tdrl`` command line: ``tdrl train <preset>`` and ``tdrl eval <run dir>``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from tdrl.errors import CheckpointError
from tdrl.train._checkpoint import CheckpointWriteError
from tdrl.train._config import OFFLINE_PRESETS, PRESETS, load_config
from tdrl.train._lock import RunLockedError
from tdrl.train._logging import LOGGERS
from tdrl.train._ray_collect import RayUnreachable
from tdrl.train._stop import EXIT_INTERRUPTED, EXIT_STOP_TIMEOUT, GracefulStop, StopTimeout

__all__ = ["build_parser", "main"]

_DESCRIPTION = """\
tdrl: train and evaluate reinforcement-learning agents.

  tdrl train ppo                      PPO on the built-in CartPole (the default preset)
  tdrl train sac --frames 15000       SAC on the built-in Pendulum
  tdrl train dqn --env gym:CartPole-v1 --num-envs 4
  tdrl train mappo                    multi-agent PPO on VMAS navigation (also ippo, qmix)
  tdrl train dqn --compile            torch.compile the update step
  tdrl train ppo --resume runs/ppo-20261129-120000
  tdrl eval runs/ppo-20261129-120000  replay the saved policy deterministically
  tdrl dataset collect runs/sac-20261129-120000 --episodes 50 --out pendulum/sac-v0

SIGTERM or Ctrl-C stops `tdrl train` after the current iteration with a checkpoint (exit 0;
continue with --resume); a second Ctrl-C stops at once (exit 130); a stop that overruns
--stop-timeout exits 124, a run directory in use or a checkpoint problem 2.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests).

    Examples:
        >>> build_parser().parse_args(["train", "ppo", "--frames", "1000"]).frames
        1000
    """
    parser = argparse.ArgumentParser(
        prog="tdrl", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,eval,dataset}")
    train = sub.add_parser(
        "train",
        help="train an agent from a preset",
        description="Train an agent. A preset (a TOML file shipped with tdrl) sets the "
        "algorithm, env and hyperparameters; --config and --set override them.",
    )
    train.add_argument(
        "preset", nargs="?", default="ppo", choices=PRESETS, help="algorithm preset (default: ppo)"
    )
    train.add_argument(
        "--env",
        help="built-in env name (CartPole, Pendulum, Navigation), gym:<id>, vmas:<scenario> "
        "or pettingzoo:<task>",
    )
    train.add_argument("--frames", type=int, help="frame budget")
    train.add_argument(
        "--dataset",
        metavar="SPEC",
        help="offline presets (iql, cql, td3bc, bc, dt): the dataset to train on, minari:<id> or "
        "d4rl:<path>; evaluation runs in the env it was recorded on",
    )
    train.add_argument(
        "--updates", type=int, help="offline presets: gradient-update budget (not frames)"
    )
    train.add_argument(
        "--online-frames",
        type=int,
        metavar="N",
        help="iql, dt: fine-tune online for N env frames after the offline updates "
        "(dt: the Online Decision Transformer)",
    )
    train.add_argument("--num-envs", type=int, help="number of envs collected from in parallel")
    train.add_argument("--seed", type=int, help="random seed")
    train.add_argument("--out", help="run directory (default: runs/<preset>-<time>)")
    train.add_argument("--config", help="a TOML or JSON file merged over the preset")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config entry, e.g. --set optim.lr=3e-4 (repeatable)",
    )
    train.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR from its newest complete checkpoint",
    )
    train.add_argument("--device", help="device for envs and networks (default: cpu)")
    train.add_argument("--quiet", action="store_true", help="no progress bar (for logs)")
    train.add_argument(
        "--tensorboard", action="store_true", help="also log to TensorBoard (--logger tensorboard)"
    )
    train.add_argument(
        "--logger",
        choices=LOGGERS,
        help="also log to an experiment logger in the run directory: csv (scalars/, videos/), "
        "tensorboard (tb/), wandb (wandb/; WANDB_MODE=offline keeps it local) or mlflow "
        "(mlruns/); needs `pip install tdrl[record]`",
    )
    train.add_argument(
        "--video",
        action="store_true",
        help="film one deterministic episode at each evaluation and at the end, through the "
        "logger (csv when none is given); the env must render (gym:<id> envs do)",
    )
    train.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the update step (settings: --set compile.backend/mode/policy=...)",
    )
    train.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="collect with Ray actors: start a local Ray, or join the cluster at ADDRESS "
        "(e.g. auto or 10.0.0.1:6379); needs `pip install tdrl[ray]`",
    )
    train.add_argument(
        "--num-collectors", type=int, help="Ray collector actors (with --ray; default: 2)"
    )
    train.add_argument(
        "--ray-timeout",
        type=float,
        metavar="SECONDS",
        help="give up connecting to Ray after this long (with --ray; default: 30)",
    )
    train.add_argument(
        "--stop-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, the time to finish the iteration and write a checkpoint "
        "before exiting anyway (default: 30)",
    )
    ev = sub.add_parser(
        "eval",
        help="evaluate a trained run",
        description="Load the newest checkpoint of a run and replay its policy "
        "deterministically; prints the mean return.",
    )
    ev.add_argument("run_dir", help="a run directory written by `tdrl train`")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to play (default: 10)")
    ev.add_argument("--seed", type=int, default=12345, help="seed of the evaluation envs")
    from tdrl.train._dataset_collect import add_dataset_parser

    add_dataset_parser(sub)
    return parser


def _resume_config(run_dir: Path) -> dict[str, Any]:
    from tdrl.data.replay._safe_io import read_json

    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"tdrl train --resume: {run_dir} is not a run directory (got no config.json; expected "
            "the --out directory of a `tdrl train` run). Check the path."
        )
    config = read_json(path, "tdrl train --resume")
    if not isinstance(config, dict) or not isinstance(config.get("algorithm"), str):
        raise CheckpointError(
            f"tdrl train --resume: {path} is not a run config (got {str(config)[:60]!r}; expected "
            "an object with an 'algorithm'). Restore it from a backup or start a new run."
        )
    return config


def _train_config(args: argparse.Namespace) -> dict[str, Any]:
    if args.resume:
        return _resume_config(Path(args.resume))
    overrides = list(args.set)
    _check_offline_flags(args)
    for flag, key in (
        ("env", "env"),
        ("frames", "frames"),
        ("dataset", "dataset"),
        ("updates", "updates"),
        ("online_frames", "online_frames"),
        ("num_envs", "num_envs"),
        ("seed", "seed"),
        ("device", "device"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    return load_config(args.preset, args.config, overrides)


def _check_offline_flags(args: argparse.Namespace) -> None:
    """--dataset/--updates/--online-frames belong to the offline presets, --frames to the rest."""
    offline = args.preset in OFFLINE_PRESETS
    wrong = ["frames"] if offline else ["dataset", "updates", "online_frames"]
    for flag in wrong:
        if getattr(args, flag) is not None:
            name = "--" + flag.replace("_", "-")
            expected = (
                "--updates: offline presets count gradient updates"
                if offline
                else f"an offline preset {OFFLINE_PRESETS}"
            )
            raise ValueError(
                f"tdrl train {args.preset}: {name} does not apply (got {name} "
                f"{getattr(args, flag)}; expected {expected}). "
                + ("Use --updates." if offline else f"Drop {name} or train an offline preset.")
            )


def make_trainer(config: dict[str, Any], out_dir: str | Path, **kwargs: Any) -> Any:
    """The trainer for ``config["algorithm"]``."""
    from tdrl.train._on_policy import OnPolicyTrainer

    if config["algorithm"] == "dt":
        from tdrl.train._offline_dt import DTTrainer
        from tdrl.train._offline_odt import ODTTrainer, is_online_dt

        return (ODTTrainer if is_online_dt(config) else DTTrainer)(config, out_dir, **kwargs)
    if config["algorithm"] in OFFLINE_PRESETS:
        from tdrl.train._offline import OfflineTrainer

        return OfflineTrainer(config, out_dir, **kwargs)
    if (config.get("env_options") or {}).get("preprocessing") == "atari":
        from tdrl.train._atari_trainers import make_atari_trainer

        return make_atari_trainer(config, out_dir, **kwargs)
    if config["algorithm"] in ("ppo", "a2c"):
        return OnPolicyTrainer(config, out_dir, **kwargs)
    if config["algorithm"] in ("mappo", "ippo"):
        from tdrl.train._multiagent_ppo import MultiAgentPPOTrainer

        return MultiAgentPPOTrainer(config, out_dir, **kwargs)
    if config["algorithm"] == "qmix":
        from tdrl.train._multiagent_qmix import QMixTrainer

        return QMixTrainer(config, out_dir, **kwargs)
    from tdrl.train._off_policy import OffPolicyTrainer

    return OffPolicyTrainer(config, out_dir, **kwargs)


def _ray_settings(args: argparse.Namespace) -> Any:
    """``--ray [ADDRESS] --num-collectors N`` (None without ``--ray``)."""
    if args.ray is None:
        for flag in ("num_collectors", "ray_timeout"):
            value = getattr(args, flag)
            if value is not None:
                name = "--" + flag.replace("_", "-")
                raise ValueError(
                    f"tdrl train: {name} needs --ray (got {name} {value} alone). Add --ray to "
                    "collect with Ray actors."
                )
        return None
    from tdrl.train._ray_collect import RaySettings

    n = 2 if args.num_collectors is None else args.num_collectors
    timeout = RaySettings.connect_timeout if args.ray_timeout is None else args.ray_timeout
    return RaySettings(args.ray or None, n, connect_timeout=timeout)


def _cmd_train(args: argparse.Namespace) -> int:
    config = _train_config(args)
    if args.compile:  # kept in the run's config.json: --resume compiles too
        config["compile"] = {**config.get("compile", {}), "enabled": True}
    out = args.resume or args.out or f"runs/{config['algorithm']}-{time.strftime('%Y%m%d-%H%M%S')}"
    ray = _ray_settings(args)
    # before the envs are built: a signal during set-up stops the run before its first batch
    with GracefulStop(args.stop_timeout) as stop:
        trainer = make_trainer(
            config,
            out,
            quiet=args.quiet,
            tensorboard=args.tensorboard,
            logger=args.logger,
            video=args.video,
            resume=bool(args.resume),
            ray=ray,
            stop=stop,
        )
        summary = trainer.run()
    print(f"run directory: {out}")
    print(json.dumps(summary, indent=2))
    if summary.get("stopped"):
        print(
            f"tdrl train: stopped by {summary['stopped']} at frame {summary['frames']}; continue "
            f"with: tdrl train --resume {out}",
            file=sys.stderr,
        )
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from tdrl.train._evaluate_run import evaluate_run

    mean, returns = evaluate_run(args.run_dir, episodes=args.episodes, seed=args.seed)
    print(f"returns: {[round(r, 1) for r in returns]}")
    print(f"mean return over {len(returns)} episodes: {mean:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tdrl`` console script and ``python -m tdrl``."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _cmd_train(args)
        if args.command == "dataset":
            from tdrl.train._dataset_collect import run_dataset_command

            return run_dataset_command(args)
        return _cmd_eval(args)
    except (
        CheckpointError,
        CheckpointWriteError,
        FileNotFoundError,
        RunLockedError,
        RayUnreachable,
    ) as err:
        # Resume, disk, lock, Ray address and eval problems are the user's to fix: a message.
        print(f"tdrl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except StopTimeout as err:
        print(f"tdrl {args.command}: error: {err}", file=sys.stderr)
        return EXIT_STOP_TIMEOUT
    except KeyboardInterrupt:
        print(
            f"tdrl {args.command}: interrupted; the newest complete checkpoint is kept",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
