"""Learning benchmark: tdrl presets beside Stable-Baselines3 (RL-Zoo hyperparameters) at the same
frame budget, env count and seeds; writes a table (final and area-under-curve evaluation
returns, wall time, frames/s) and a plot of evaluation return against frames.

tdrl runs through ``tdrl train`` (each run's ``metrics.csv``); SB3 runs through this same file in
a separate venv (``--sb3-worker``), which never imports tdrl. SB3 is not a tdrl dependency:

    python3.11 -m venv /tmp/sb3-venv
    /tmp/sb3-venv/bin/pip install torch==2.13.0 stable-baselines3 "gymnasium[mujoco]>=1.1"

Full runs (issue 26; about an hour per run on 2 cores):

    .venv/bin/python benchmarks/learning/run.py --presets sac_mujoco td3_mujoco \
        --envs gym:HalfCheetah-v5 --frames 100000 --seeds 0 1 2 --sb3-python /tmp/sb3-venv/bin/python
    .venv/bin/python benchmarks/learning/run.py --presets ppo_mujoco --envs gym:Hopper-v5 \
        --frames 200000 --seeds 0 1 2 --sb3-python /tmp/sb3-venv/bin/python

A tiny end-to-end check (``--learning-starts`` shortens the random warm-up on both sides):

    .venv/bin/python benchmarks/learning/run.py --presets sac_mujoco --frames 2000 --seeds 0 \
        --eval-every 500 --eval-episodes 2 --learning-starts 500 --sb3-python /tmp/sb3-venv/bin/python
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALGOS = {"sac_mujoco": "sac", "td3_mujoco": "td3", "ppo_mujoco": "ppo"}


# ---------------------------------------------------------------- SB3 side (its own venv)
def _sb3_model(algo: str, env, seed: int, learning_starts: int | None):
    """SB3 with RL-Zoo's hyperparameters (the same values as the tdrl presets' comments)."""
    import numpy as np
    from stable_baselines3 import PPO, SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    starts = 10_000 if learning_starts is None else learning_starts
    if algo == "sac":  # RL-Zoo sac.yml MuJoCo: learning_starts 10000, SB3 defaults
        return SAC("MlpPolicy", env, learning_starts=starts, seed=seed, device="cpu")
    if algo == "td3":  # RL-Zoo td3.yml MuJoCo
        n = env.action_space.shape[-1]
        return TD3(
            "MlpPolicy",
            env,
            learning_starts=starts,
            action_noise=NormalActionNoise(np.zeros(n), 0.1 * np.ones(n)),
            learning_rate=1e-3,
            batch_size=256,
            train_freq=1,
            gradient_steps=1,
            policy_kwargs={"net_arch": [400, 300]},
            seed=seed,
            device="cpu",
        )
    # SB3's PPO defaults under VecNormalize (RL-Zoo's MuJoCo set-up; CleanRL's values)
    return PPO(
        "MlpPolicy", env, n_steps=2048 // env.num_envs, batch_size=64, seed=seed, device="cpu"
    )


def sb3_worker(args: argparse.Namespace) -> None:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)  # as tdrl train (threads = 1)
    env_id = args.env.removeprefix("gym:")
    env = make_vec_env(env_id, n_envs=args.num_envs, seed=args.seed)
    if args.algo == "ppo":
        env = VecNormalize(env, norm_obs=True, norm_reward=True, clip_obs=10.0, gamma=0.99)
    model = _sb3_model(args.algo, env, args.seed, args.learning_starts)
    eval_env = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id) for _ in range(args.eval_episodes)]
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    t0 = time.perf_counter()

    def evaluate() -> float:
        obs, _ = eval_env.reset(seed=args.seed + 10_000)
        total = np.zeros(args.eval_episodes)
        alive = np.ones(args.eval_episodes, dtype=bool)
        while alive.any():
            if isinstance(env, VecNormalize):
                obs = env.normalize_obs(obs)  # the training statistics, not updated
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, term, trunc, _ = eval_env.step(action)
            total += reward * alive
            alive &= ~(term | trunc)
        return float(total.mean())

    class Evals(BaseCallback):
        def _on_step(self) -> bool:
            frames = self.model.num_timesteps
            if frames % args.eval_every < args.num_envs:
                rows.append(
                    {
                        "frames": frames,
                        "eval_return": evaluate(),
                        "time": time.perf_counter() - t0,
                    }
                )
            return True

    model.learn(total_timesteps=args.frames, callback=Evals())
    if not rows or rows[-1]["frames"] != model.num_timesteps:
        rows.append(
            {
                "frames": model.num_timesteps,
                "eval_return": evaluate(),
                "time": time.perf_counter() - t0,
            }
        )
    with open(out / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["frames", "time", "eval_return"])
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------- orchestration (tdrl venv)
def run_tdrl(preset: str, env: str, seed: int, args: argparse.Namespace, out: Path) -> None:
    cmd = [sys.executable, "-m", "tdrl", "train", preset, "--env", env, "--frames"]
    cmd += [str(args.frames), "--seed", str(seed), "--num-envs", str(args.num_envs)]
    cmd += ["--quiet", "--out", str(out)]
    sets = [f"eval.every_frames={args.eval_every}", f"eval.episodes={args.eval_episodes}"]
    sets.append(f"logging.checkpoint_every_frames={args.frames}")
    if args.learning_starts is not None and ALGOS[preset] != "ppo":
        sets.append(f"collector.init_random_frames={args.learning_starts}")
    for item in sets:
        cmd += ["--set", item]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def run_sb3(preset: str, env: str, seed: int, args: argparse.Namespace, out: Path) -> None:
    cmd = [args.sb3_python, __file__, "--sb3-worker", "--algo", ALGOS[preset], "--env", env]
    cmd += ["--frames", str(args.frames), "--seed", str(seed), "--num-envs", str(args.num_envs)]
    cmd += ["--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes)]
    cmd += ["--out", str(out)]
    if args.learning_starts is not None:
        cmd += ["--learning-starts", str(args.learning_starts)]
    subprocess.run(cmd, check=True)


def read_curve(path: Path) -> list[tuple[int, float, float]]:
    """(frames, time, eval_return) of the rows with an evaluation."""
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("eval_return")]
    return [(int(float(r["frames"])), float(r["time"]), float(r["eval_return"])) for r in rows]


def score(curve: list[tuple[int, float, float]], budget: int) -> dict[str, float]:
    """Final return, area under the return curve per frame (trapezoids over the evaluation
    points, divided by the frames they span), wall time and frames/s."""
    frames = [c[0] for c in curve]
    returns = [c[2] for c in curve]
    area = sum(
        (frames[i + 1] - frames[i]) * (returns[i] + returns[i + 1]) / 2
        for i in range(len(curve) - 1)
    )
    span = frames[-1] - frames[0]
    wall = curve[-1][1]
    return {
        "final": returns[-1],
        "auc": area / span if span else returns[-1],
        "wall_s": wall,
        "fps": frames[-1] / wall,
    }


def _fmt(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.1f} ± {statistics.stdev(values):.1f}" if len(values) > 1 else f"{mean:.1f}"


def report(results: dict, args: argparse.Namespace, out: Path) -> None:
    lines = [
        f"frames {args.frames}, seeds {args.seeds}, num_envs {args.num_envs}, "
        f"eval every {args.eval_every} frames over {args.eval_episodes} episodes",
        "",
        "| preset | env | impl | final return | AUC return | wall s | frames/s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for (preset, env, impl), runs in results.items():
        scores = [score(curve, args.frames) for curve in runs.values()]
        cols = [_fmt([s[k] for s in scores]) for k in ("final", "auc", "wall_s", "fps")]
        lines.append(f"| {preset} | {env} | {impl} | " + " | ".join(cols) + " |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (preset, env, impl), runs in results.items():
        for i, curve in enumerate(runs.values()):
            label = f"{preset} {env} {impl}" if i == 0 else None
            style = "-" if impl == "tdrl" else "--"
            ax.plot([c[0] for c in curve], [c[2] for c in curve], style, label=label, alpha=0.8)
    ax.set_xlabel("frames")
    ax.set_ylabel("evaluation return")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "returns.png", dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--presets", nargs="+", default=["sac_mujoco"], choices=sorted(ALGOS))
    p.add_argument("--envs", nargs="+", default=["gym:HalfCheetah-v5"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--learning-starts", type=int, help="off-policy random warm-up (both sides)")
    p.add_argument("--sb3-python", help="python of the SB3 venv (omit: tdrl only)")
    p.add_argument("--out", default=str(ROOT / "benchmarks/learning/out"))
    p.add_argument("--sb3-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--algo", help=argparse.SUPPRESS)
    p.add_argument("--env", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.sb3_worker:
        sb3_worker(args)
        return
    out = Path(args.out)
    results: dict = {}
    impls = [("tdrl", run_tdrl)] + ([("sb3", run_sb3)] if args.sb3_python else [])
    for preset in args.presets:
        for env in args.envs:
            for impl, runner in impls:
                for seed in args.seeds:
                    run_dir = out / f"{preset}-{env.replace(':', '_')}-{impl}-s{seed}"
                    runner(preset, env, seed, args, run_dir)
                    curve = read_curve(run_dir / "metrics.csv")
                    results.setdefault((preset, env, impl), {})[seed] = curve
                    print(f"{impl} {preset} {env} seed {seed}: {score(curve, args.frames)}")
    (out / "results.json").write_text(
        json.dumps({" ".join(k): v for k, v in results.items()}, indent=1)
    )
    report(results, args, out)


if __name__ == "__main__":
    main()
