"""Run logging: metrics.csv, an optional experiment logger (CSV, TensorBoard, W&B, MLflow) with
evaluation videos, a tqdm progress bar and the learning curve."""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tdrl.envs import EnvBase
    from tdrl.record.loggers import Logger

__all__ = [
    "LOGGERS",
    "EvalVideo",
    "RunLogger",
    "make_run_logger",
    "plot_learning_curve",
    "read_metrics",
    "truncate_metrics",
    "write_summary",
]

LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
_COLUMNS = ["iteration", "frames", "time", "fps", "train_return", "eval_return"]


class RunLogger:
    """Writes one CSV row per iteration, sends the numbers to an experiment logger when asked,
    films evaluations, and drives tqdm.

    Args:
        out_dir: the run directory (``metrics.csv`` goes there).
        total_frames: the frame budget (progress bar length).
        quiet: no progress bar (for logs): a one-line summary every ``print_every`` rows.
        tensorboard: same as ``backend="tensorboard"`` (``tdrl train --tensorboard``).
        start_frames: frames already done (when resuming).
        step_key: the row entry that counts progress (the bar, the logger's step):
            ``"frames"``, or ``"updates"`` for the offline presets.
        backend: also log every row's numbers (step: the row's frames) through a
            :mod:`tdrl.record` logger in the run directory (see :func:`make_run_logger`):
            ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``.
        video: an :class:`EvalVideo`: each row holding ``eval_return`` and the end of the
            run (:meth:`close`) film one episode of ``policy`` through the logger.
        policy: what ``video`` films.
        config: the run's config, logged as hyperparameters on a fresh run.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     log = RunLogger(d, total_frames=10, quiet=True)
        ...     log.log({"iteration": 1, "frames": 10, "loss_objective": 0.5})
        ...     log.close()
        ...     print(open(f"{d}/metrics.csv").read().splitlines()[0].split(",")[:3])
        ['iteration', 'frames', 'time']
    """

    def __init__(
        self,
        out_dir: str | Path,
        total_frames: int,
        *,
        quiet: bool = False,
        tensorboard: bool = False,
        start_frames: int = 0,
        step_key: str = "frames",
        print_every: int = 10,
        backend: str | None = None,
        video: EvalVideo | None = None,
        policy: Any = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(out_dir) / "metrics.csv"
        self.step_key = step_key
        self.quiet = quiet
        self.print_every = print_every
        self._rows = 0
        self._columns: list[str] | None = None
        if self.path.exists():
            with self.path.open() as f:
                header = next(csv.reader(f), None)
            self._columns = header
        backend = _backend_name(backend, tensorboard, video)
        self.backend = make_run_logger(backend, out_dir, config) if backend else None
        if self.backend is not None and start_frames > 0:
            _truncate_backend(self.backend, start_frames)
        elif self.backend is not None and config is not None:
            self.backend.log_hparams(_flat(config))
        self.video, self.policy = video, policy
        self._filmed: int | None = None
        self._bar = None
        if not quiet:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_frames,
                initial=start_frames,
                unit=step_key.removesuffix("s"),
                dynamic_ncols=True,
                smoothing=0.1,
            )
        self._last_frames = start_frames

    def log(self, row: dict[str, Any]) -> None:
        """Appends a row (missing columns are left empty) and updates the progress bar.

        A key first seen after the header was written (a loss that starts after the warm-up
        frames, a group's first finished episode) becomes a new column: the file is rewritten
        with the wider header, earlier rows empty in it.
        """
        if self._columns is None:
            extra = sorted(k for k in row if k not in _COLUMNS)
            self._columns = _COLUMNS + extra
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self._columns)
        elif any(k not in self._columns for k in row):
            self._widen([k for k in row if k not in self._columns])
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self._columns, extrasaction="ignore", restval="").writerow(
                {k: _fmt(v) for k, v in row.items()}
            )
        frames = int(row.get(self.step_key, self._last_frames))
        if self.backend is not None:
            numbers = {
                k: v
                for k, v in row.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            }
            self.backend.log_metrics(numbers, step=frames)
            if self.video is not None and "eval_return" in row:
                self._film(frames)
        self._rows += 1
        if self._bar is not None:
            self._bar.update(frames - self._last_frames)
            self._bar.set_postfix(_postfix(row), refresh=False)
        elif self._rows % self.print_every == 0:
            print(" ".join(f"{k}={v}" for k, v in _postfix(row).items()), flush=True)
        self._last_frames = frames

    def _widen(self, new: list[str]) -> None:
        """Rewrites metrics.csv atomically with ``new`` columns added (sorted, after the rest)."""
        assert self._columns is not None
        rows = read_metrics(self.path)
        self._columns = self._columns + sorted(new)
        _write_rows(self.path, self._columns, rows)

    def _film(self, frames: int) -> None:
        assert self.video is not None and self.backend is not None
        self.video.record(self.policy, self.backend, frames)
        self._filmed = frames

    def close(self) -> None:
        """Films the final policy (when filming, the last frames were not filmed and no error
        is propagating), then closes the progress bar and the experiment logger."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.backend is not None:
            failing = sys.exc_info()[0] is not None  # closed while an error propagates
            if self.video and self._rows and self._filmed != self._last_frames and not failing:
                self._film(self._last_frames)
            self.backend.close()
            self.backend = None


class EvalVideo:
    """Films one deterministic episode of a policy on a rendering copy of the run's env.

    ``gym:<id>`` envs are rebuilt as single ``GymEnv(id, from_pixels=True,
    pixels_only=False)`` envs; other envs need a ``render()`` method (read through
    :class:`~tdrl.record.PixelRenderTransform`). A :class:`~tdrl.record.VideoRecorder` keeps
    one frame in ``skip`` (at most ``max_frames``) and writes the video through the run's
    logger under the tag ``"eval/video"`` at the run's frame count.

    Args:
        env_name: the run's env (``config["env"]``).
        seed: the seed of the filmed env.
        device: its device.
        options: the config's ``env_options``.
        max_steps: the longest episode filmed.
        skip: keep one frame in ``skip`` (default 2, TorchRL's for a single env).
        max_frames: the most frames per video (bounds the memory: a 400 x 600 frame takes
            720 kB).
        fps: frames per second.

    Raises:
        ValueError: the env cannot render (the message names it).

    Examples:
        >>> EvalVideo("CartPole", seed=0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: tdrl train --video: the env 'CartPole' cannot render frames ...
    """

    def __init__(
        self,
        env_name: str,
        *,
        seed: int,
        device: str = "cpu",
        options: dict[str, Any] | None = None,
        max_steps: int = 10_000,
        skip: int = 2,
        max_frames: int = 200,
        fps: int = 30,
    ) -> None:
        from tdrl.record import VideoRecorder

        self.max_steps = max_steps
        self.recorder = VideoRecorder(
            None, tag="eval/video", skip=skip, max_frames=max_frames, fps=fps
        )
        self.env = _render_env(env_name, seed, device, options).append_transform(self.recorder)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EvalVideo:
        """The filming of a run: its env, seed and device; ``eval.max_steps``; the optional
        ``video`` table (``skip``, ``max_frames``, ``fps``)."""
        settings = dict(config.get("video", {}))
        return cls(
            config["env"],
            seed=int(config.get("seed", 0)) + 20_000,
            device=config.get("device", "cpu"),
            options=config.get("env_options"),
            max_steps=int(config.get("eval", {}).get("max_steps", 10_000)),
            skip=int(settings.get("skip", 2)),
            max_frames=int(settings.get("max_frames", 200)),
            fps=int(settings.get("fps", 30)),
        )

    def record(self, policy: Any, logger: Logger, step: int) -> None:
        """Plays one episode with the deterministic ``policy`` and logs its video at ``step``."""
        from tdrl.train._eval import evaluate

        evaluate(self.env, policy, max_steps=self.max_steps)
        self.recorder.logger = logger
        self.recorder.dump(step=step)


def _render_env(name: str, seed: int, device: str, options: dict[str, Any] | None) -> EnvBase:
    """A single env of ``name`` that writes ``"pixels"`` (its ``render()`` image)."""
    from tdrl.record import PixelRenderTransform
    from tdrl.record._render import find_render
    from tdrl.train._builders import make_env

    cannot = (
        f"tdrl train --video: the env {name!r} cannot render frames (got %s; expected a "
        "gym:<id> env with an rgb_array render mode, or an env with a render() method). Use "
        "e.g. --env gym:CartPole-v1, or drop --video."
    )
    if name.startswith("gym:"):
        from tdrl.envs import GymEnv

        try:
            env: EnvBase = GymEnv(name[4:], from_pixels=True, pixels_only=False, device=device)
        except ValueError as err:
            raise ValueError(cannot % f"GymEnv(from_pixels=True) failing: {err}") from err
    else:
        env = make_env(name, 1, seed=seed, device=device, options=options)
        if find_render(env, "render") is None:
            raise ValueError(cannot % f"{type(env).__name__}, which has no render()")
        env = env.append_transform(PixelRenderTransform())
    env.set_seed(seed)
    return env


def _backend_name(backend: str | None, tensorboard: bool, video: Any) -> str | None:
    """The logger type: ``backend``, ``--tensorboard``'s, or ``"csv"`` for videos alone."""
    if backend is not None and backend not in LOGGERS:
        raise ValueError(
            f"RunLogger.__init__: unknown logger (got {backend!r}; expected one of {LOGGERS}). "
            "Pick one of them."
        )
    if tensorboard and backend not in (None, "tensorboard"):
        raise ValueError(
            f"RunLogger.__init__: --tensorboard and --logger {backend} ask for two loggers (got "
            "both; expected one). Use --logger tensorboard, or drop --tensorboard."
        )
    if tensorboard:
        return "tensorboard"
    return backend if backend is not None or video is None else "csv"


def make_run_logger(
    backend: str, out_dir: str | Path, config: dict[str, Any] | None = None
) -> Logger:
    """The :mod:`tdrl.record` logger of a run, writing inside the run directory.

    - ``"csv"``: ``CSVLogger`` with the run directory as its experiment folder:
      ``scalars/<name>.csv``, ``videos/<tag>_<frames>.mp4``, ``texts/hparams0.txt``.
    - ``"tensorboard"``: event files in ``tb/`` (where ``--tensorboard`` always wrote).
    - ``"wandb"``: a W&B run named after the run directory, its files in ``wandb/``; the
      project is ``logging.wandb_project`` (default ``"tdrl"``). ``WANDB_MODE=offline`` keeps
      it local.
    - ``"mlflow"``: a run of the MLflow experiment named after the run directory, in the
      file store ``mlruns/``.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     logger = make_run_logger("csv", d)
        ...     logger.log_scalar("eval_return", 1.0, step=10)
        ...     logger.close()
        ...     (Path(d) / "scalars" / "eval_return.csv").read_text().splitlines()
        ['10,1.0']
    """
    from tdrl.record.loggers import CSVLogger, MLFlowLogger, TensorboardLogger, WandbLogger

    out = Path(out_dir).resolve()
    if backend == "csv":
        return CSVLogger(out.name, log_dir=str(out.parent), video_format="mp4")
    if backend == "tensorboard":
        return TensorboardLogger("tb", log_dir=str(out))
    if backend == "wandb":
        project = (config or {}).get("logging", {}).get("wandb_project", "tdrl")
        return WandbLogger(out.name, save_dir=str(out), project=project, log_env_packages=False)
    if backend == "mlflow":
        return MLFlowLogger(out.name, tracking_uri=(out / "mlruns").as_uri())
    raise ValueError(
        f"make_run_logger: unknown logger (got {backend!r}; expected one of {LOGGERS}). Pick "
        "one of them."
    )


def _truncate_backend(logger: Logger, max_frames: int) -> None:
    """On resume, drops the CSV logger's scalar lines after ``max_frames`` (as metrics.csv)."""
    from tdrl.record.loggers import CSVLogger

    if not isinstance(logger, CSVLogger):
        return
    for path in Path(logger.experiment.log_dir, "scalars").rglob("*.csv"):
        lines = path.read_text().splitlines()
        kept = [line for line in lines if int(float(line.split(",", 1)[0])) <= max_frames]
        if len(kept) != len(lines):
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept))
            tmp.replace(path)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}`` (lists as their text)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, int | float | str | bool) else str(value)
    return out


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _postfix(row: dict[str, Any]) -> dict[str, str]:
    losses = [k for k in row if k == "loss" or k.startswith("loss_")]  # DQN's key is "loss"
    keep = ["fps", "train_return", "eval_return", *losses[:2]]
    out = {}
    for k in keep:
        v = row.get(k)
        if isinstance(v, float) and math.isfinite(v):
            out[k.replace("loss_", "L_")] = f"{v:.3g}"
    return out


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    """Rows of a metrics.csv file as dicts."""
    with Path(path).open() as f:
        return list(csv.DictReader(f))


def truncate_metrics(path: str | Path, max_frames: int, *, column: str = "frames") -> None:
    """Drops rows whose ``column`` (the progress count) is past ``max_frames`` (used when
    resuming from an older checkpoint)."""
    path = Path(path)
    if not path.exists():
        return
    rows = read_metrics(path)
    if not rows:
        return
    columns = list(rows[0].keys())
    kept = [r for r in rows if int(float(r.get(column) or 0)) <= max_frames]
    _write_rows(path, columns, kept)


def _write_rows(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    """Writes a CSV file atomically (a temporary sibling, then a rename)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def _series(rows: list[dict[str, str]], column: str, x: str) -> list[tuple[float, float]]:
    return [(float(r[x]), float(r[column])) for r in rows if r.get(column) and r.get(x)]


def _curves(rows: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    """``(label prefix, train column, eval column)`` per curve: one per group when the run has
    per-group columns (``train_return/<group>``, ``eval_return/<group>``), else the run's."""
    columns = rows[0].keys() if rows else ()
    groups = sorted(
        {c.split("/", 1)[1] for c in columns if c.startswith(("train_return/", "eval_return/"))}
    )
    if not groups:
        return [("", "train_return", "eval_return")]
    return [(f"{g}: ", f"train_return/{g}", f"eval_return/{g}") for g in groups]


def plot_learning_curve(run_dir: str | Path, window: int = 10, *, x: str = "frames") -> Path | None:
    """Writes ``learning_curve.png``: training return (and its rolling mean) and eval return
    against the metrics column ``x`` (``"frames"``; ``"updates"`` for the offline presets).

    A multi-agent run (per-group columns ``train_return/<group>`` and ``eval_return/<group>``)
    gets one set of curves per group, in one colour each.

    Returns the path, or None when matplotlib is missing or there is nothing to plot.
    """
    run_dir = Path(run_dir)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the install
        return None
    rows = read_metrics(run_dir / "metrics.csv") if (run_dir / "metrics.csv").exists() else []
    curves = [(p, _series(rows, t, x), _series(rows, e, x)) for p, t, e in _curves(rows)]
    if not any(train or evals for _, train, evals in curves):
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (prefix, train, evals) in enumerate(curves):
        _draw(ax, prefix, train, evals, window, f"C{i}" if prefix else None)
    ax.set_xlabel(x)
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = run_dir / "learning_curve.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _draw(
    ax: Any,
    prefix: str,
    train: list[tuple[float, float]],
    evals: list[tuple[float, float]],
    window: int,
    color: str | None,
) -> None:
    """One run's (or group's) curves: raw and rolling-mean train return, eval return."""
    if train:
        xs, ys = zip(*train)
        ax.plot(xs, ys, alpha=0.3, label=f"{prefix}train return", color=color)
        roll = [
            sum(ys[max(0, i - window + 1) : i + 1]) / len(ys[max(0, i - window + 1) : i + 1])
            for i in range(len(ys))
        ]
        ax.plot(xs, roll, label=f"{prefix}train return (rolling mean {window})", color=color)
    if evals:
        xs, ys = zip(*evals)
        ax.plot(xs, ys, "o-", label=f"{prefix}eval return (deterministic)", color=color)


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> None:
    """Writes ``summary.json`` atomically."""
    path = Path(run_dir) / "summary.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True))
    tmp.replace(path)


def now() -> float:
    """Monotonic time in seconds."""
    return time.perf_counter()
