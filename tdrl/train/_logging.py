"""Run logging: metrics.csv, optional TensorBoard, a tqdm progress bar and the learning curve."""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

__all__ = ["RunLogger", "plot_learning_curve", "read_metrics", "truncate_metrics", "write_summary"]

_COLUMNS = ["iteration", "frames", "time", "fps", "train_return", "eval_return"]


class RunLogger:
    """Writes one CSV row per iteration (and TensorBoard scalars when asked) and drives tqdm.

    Args:
        out_dir: the run directory (``metrics.csv`` goes there).
        total_frames: the frame budget (progress bar length).
        quiet: no progress bar (for logs): a one-line summary every ``print_every`` rows.
        tensorboard: also write TensorBoard event files under ``out_dir/tb``.
        start_frames: frames already done (when resuming).

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
        print_every: int = 10,
    ) -> None:
        self.path = Path(out_dir) / "metrics.csv"
        self.quiet = quiet
        self.print_every = print_every
        self._rows = 0
        self._columns: list[str] | None = None
        if self.path.exists():
            with self.path.open() as f:
                header = next(csv.reader(f), None)
            self._columns = header
        self._tb = _make_tb(Path(out_dir) / "tb") if tensorboard else None
        self._bar = None
        if not quiet:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_frames,
                initial=start_frames,
                unit="frame",
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
        frames = int(row.get("frames", self._last_frames))
        if self._tb is not None:
            for k, v in row.items():
                if isinstance(v, int | float) and math.isfinite(v):
                    self._tb.add_scalar(k, v, frames)
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

    def close(self) -> None:
        """Closes the progress bar and TensorBoard writer."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _make_tb(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "RunLogger: TensorBoard logging was asked for but tensorboard is not installed "
            "(pip install tensorboard, or run without --tensorboard)."
        ) from err
    return SummaryWriter(str(path))


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


def truncate_metrics(path: str | Path, max_frames: int) -> None:
    """Drops rows logged after ``max_frames`` (used when resuming from an older checkpoint)."""
    path = Path(path)
    if not path.exists():
        return
    rows = read_metrics(path)
    if not rows:
        return
    columns = list(rows[0].keys())
    kept = [r for r in rows if int(float(r["frames"] or 0)) <= max_frames]
    _write_rows(path, columns, kept)


def _write_rows(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    """Writes a CSV file atomically (a temporary sibling, then a rename)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def _series(rows: list[dict[str, str]], column: str) -> list[tuple[float, float]]:
    return [(float(r["frames"]), float(r[column])) for r in rows if r.get(column)]


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


def plot_learning_curve(run_dir: str | Path, window: int = 10) -> Path | None:
    """Writes ``learning_curve.png``: training return (and its rolling mean) and eval return.

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
    curves = [(p, _series(rows, t), _series(rows, e)) for p, t, e in _curves(rows)]
    if not any(train or evals for _, train, evals in curves):
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (prefix, train, evals) in enumerate(curves):
        _draw(ax, prefix, train, evals, window, f"C{i}" if prefix else None)
    ax.set_xlabel("frames")
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
