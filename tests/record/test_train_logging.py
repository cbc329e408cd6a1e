"""`tdrl train --logger ... --video` on a tiny budget: the loggers' files in the run directory."""

from __future__ import annotations

import csv
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tdrl.train._logging import RunLogger, make_run_logger
from tdrl.train.cli import main

_TINY = [
    "--frames",
    "64",
    "--num-envs",
    "2",
    "--quiet",
    "--set",
    "collector.frames_per_batch=32",
    "--set",
    "eval.every_frames=32",
    "--set",
    "eval.episodes=2",
    "--set",
    "loss.epochs=1",
    "--set",
    "loss.minibatch_size=32",
]


def _train(out, *flags, env="CartPole"):
    assert main(["train", "ppo", "--env", env, "--out", str(out), *_TINY, *flags]) == 0


def _metrics(out):
    with open(out / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _eval_rows(out):
    return [(int(r["frames"]), float(r["eval_return"])) for r in _metrics(out) if r["eval_return"]]


def _assert_run_files(out):
    for name in ("metrics.csv", "summary.json", "learning_curve.png", "config.json"):
        assert (out / name).is_file(), name


def test_csv_logger_and_video_on_gym_cartpole(tmp_path, decode_mp4):
    out = tmp_path / "run"
    _train(out, "--logger", "csv", "--video", env="gym:CartPole-v1")
    _assert_run_files(out)
    lines = (out / "scalars" / "eval_return.csv").read_text().splitlines()
    assert [(int(s), float(v)) for s, v in (x.split(",") for x in lines)] == _eval_rows(out)
    assert (out / "scalars" / "frames.csv").read_text().splitlines() == ["32,32.0", "64,64.0"]
    hparams = (out / "texts" / "hparams0.txt").read_text()
    assert "algorithm: ppo" in hparams and "optim.lr: 0.001" in hparams
    videos = sorted((out / "videos" / "eval").glob("video_*.mp4"))
    assert [v.name for v in videos] == ["video_32.mp4", "video_64.mp4"]
    frames = decode_mp4(videos[-1])
    assert frames.shape[1:] == (400, 600, 3) and 1 <= frames.shape[0] <= 200
    assert json.loads((out / "summary.json").read_text())["frames"] == 64


def test_tensorboard_flag_is_an_alias(tmp_path):
    for flags, name in ((["--tensorboard"], "a"), (["--logger", "tensorboard"], "b")):
        _train(tmp_path / name, *flags)
        acc = EventAccumulator(str(tmp_path / name / "tb"))
        acc.Reload()
        steps = [(int(e.step), e.value) for e in acc.Scalars("eval_return")]
        assert steps == [(f, pytest.approx(v)) for f, v in _eval_rows(tmp_path / name)]
        _assert_run_files(tmp_path / name)


def test_wandb_offline(tmp_path, offline_wandb, wandb_run):
    out = tmp_path / "run"
    _train(out, "--logger", "wandb")
    _assert_run_files(out)
    (run,) = (out / "wandb").glob("offline-run-*")
    rows = wandb_run.history(run)
    evals = [(r["step"], r["eval_return"]) for r in rows if "eval_return" in r]
    assert evals == [(f, pytest.approx(v)) for f, v in _eval_rows(out)]
    assert wandb_run.config(run)["algorithm"] == "ppo"


def test_mlflow_file_store(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    out = tmp_path / "run"
    _train(out, "--logger", "mlflow")
    _assert_run_files(out)
    client = mlflow.tracking.MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "run"]
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "eval_return")
    assert [(m.step, m.value) for m in history] == [
        (f, pytest.approx(v)) for f, v in _eval_rows(out)
    ]
    assert run.data.params["algorithm"] == "ppo" and run.info.status == "FINISHED"


def test_video_of_an_env_that_cannot_render_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"the env 'CartPole' cannot render frames .*CartPoleEnv"):
        _train(tmp_path / "run", "--video")
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_two_loggers_are_refused(tmp_path):
    with pytest.raises(ValueError, match="ask for two loggers"):
        _train(tmp_path / "run", "--tensorboard", "--logger", "csv")


def test_unknown_logger_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "ppo", "--logger", "neptune", "--out", str(tmp_path)])
    assert "invalid choice: 'neptune'" in capsys.readouterr().err


def test_resume_drops_csv_scalars_after_the_checkpoint(tmp_path):
    logger = RunLogger(tmp_path, total_frames=30, quiet=True, backend="csv", config={"a": 1})
    for frames in (10, 20, 30):
        logger.log({"iteration": frames // 10, "frames": frames, "eval_return": 1.0})
    logger.close()
    resumed = RunLogger(tmp_path, total_frames=30, quiet=True, backend="csv", start_frames=20)
    resumed.close()
    assert (tmp_path / "scalars" / "frames.csv").read_text() == "10,10.0\n20,20.0\n"
    assert not (tmp_path / "texts" / "hparams1.txt").exists()  # hparams once, not on resume


def test_make_run_logger_rejects_unknown_names(tmp_path):
    with pytest.raises(ValueError, match="unknown logger"):
        make_run_logger("neptune", tmp_path)


class FakeVideo:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def record(self, policy, logger, step):
        assert policy == "policy" and logger is not None
        self.steps.append(step)


def test_run_logger_films_each_evaluation_and_the_end(tmp_path):
    video = FakeVideo()
    logger = RunLogger(tmp_path, 40, quiet=True, backend="csv", video=video, policy="policy")
    for frames, evals in ((10, True), (20, False), (30, True), (40, False)):
        row = {"iteration": frames // 10, "frames": frames}
        logger.log({**row, "eval_return": 1.0} if evals else row)
    logger.close()
    assert video.steps == [10, 30, 40]


def test_run_logger_does_not_film_while_an_error_propagates(tmp_path):
    video = FakeVideo()
    logger = RunLogger(tmp_path, 40, quiet=True, backend="csv", video=video, policy="policy")
    logger.log({"iteration": 1, "frames": 10})
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        finally:
            logger.close()
    assert video.steps == []
    assert (tmp_path / "scalars" / "frames.csv").read_text() == "10,10.0\n"
