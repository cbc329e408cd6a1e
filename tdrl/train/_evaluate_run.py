"""``tdrl eval``: rebuild a run's policy from its config and newest checkpoint and replay it."""

from __future__ import annotations

import json
from pathlib import Path

from tdrl.train._checkpoint import latest_checkpoint, load_checkpoint

__all__ = ["evaluate_run"]


def evaluate_run(
    run_dir: str | Path, *, episodes: int = 10, seed: int = 12345
) -> tuple[float, list[float]]:
    """Mean deterministic return of a run's newest checkpoint over ``episodes`` episodes.

    Raises:
        FileNotFoundError: the directory has no config.json or no complete checkpoint.
    """
    from tdrl.train._builders import make_env
    from tdrl.train._eval import evaluate
    from tdrl.train.cli import make_trainer

    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(
            f"tdrl eval: {run_dir} is not a run directory (no config.json). Pass the --out "
            "directory of a `tdrl train` run."
        )
    path = latest_checkpoint(run_dir)
    if path is None:
        raise FileNotFoundError(f"tdrl eval: {run_dir} has no complete checkpoint yet.")
    config = json.loads(cfg_path.read_text())
    config["num_envs"] = 1
    config.setdefault("eval", {})["episodes"] = 1
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        trainer = make_trainer(config, scratch, quiet=True)
        load_checkpoint(path, modules=trainer.modules)
        env = make_env(config["env"], episodes, seed=seed, device=config.get("device", "cpu"))
        returns = evaluate(env, trainer.policy)
    return sum(returns) / len(returns), returns
