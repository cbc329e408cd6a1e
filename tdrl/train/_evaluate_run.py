"""``tdrl eval``: rebuild a run's policy from its config and newest checkpoint and replay it."""

from __future__ import annotations

from pathlib import Path

from tdrl.data.replay._safe_io import read_json
from tdrl.errors import CheckpointError
from tdrl.train._checkpoint import load_latest, report_to_stderr

__all__ = ["evaluate_run"]


def evaluate_run(
    run_dir: str | Path, *, episodes: int = 10, seed: int = 12345
) -> tuple[float, list[float]]:
    """Mean deterministic return of a run's newest checkpoint over ``episodes`` episodes.

    The newest checkpoint that verifies is used; newer ones that fail are reported on stderr.

    Raises:
        FileNotFoundError: the directory has no config.json or no checkpoint.
        CheckpointError: the config is malformed, or no checkpoint verifies.
    """
    from tdrl.train._builders import make_env
    from tdrl.train.cli import make_trainer

    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(
            f"tdrl eval: {run_dir} is not a run directory (no config.json). Pass the --out "
            "directory of a `tdrl train` run."
        )
    config = read_json(cfg_path, "tdrl eval")
    if not isinstance(config, dict):
        raise CheckpointError(
            f"tdrl eval: {cfg_path} is not a run config (got {type(config).__name__}; expected "
            "an object). Pass the --out directory of a `tdrl train` run."
        )
    config["num_envs"] = 1
    config.setdefault("eval", {})["episodes"] = 1
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        trainer = make_trainer(config, scratch, quiet=True)
        load_latest(run_dir, where="tdrl eval", report=report_to_stderr, modules=trainer.modules)
        env = make_env(
            config["env"],
            episodes,
            seed=seed,
            device=config.get("device", "cpu"),
            options=config.get("env_options"),
        )
        returns = trainer.episode_returns(env)
    return sum(returns) / len(returns), returns
