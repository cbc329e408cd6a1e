"""MLFlowLogger: a local file store, read back with mlflow's client."""

from __future__ import annotations

import sys

import pytest
import torch

from tdrl.record.loggers import MLFlowLogger


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    return (tmp_path / "mlruns").as_uri()


def test_metrics_params_video_and_text_read_back(store, decode_mp4):
    import mlflow

    logger = MLFlowLogger("exp", tracking_uri=store, tags={"team": "rl"})
    logger.log_scalar("loss", 0.5, step=1)
    logger.log_scalar("loss", torch.tensor(0.25), step=2)
    assert logger.log_metrics({"a": torch.tensor(1.5), "b": 2}, step=3) == {"b": 2, "a": 1.5}
    logger.log_hparams({"lr": 0.1, "algo": "ppo"})
    video = torch.zeros(2, 4, 3, 16, 24, dtype=torch.uint8)
    video[-1, :, 0] = torch.arange(4, dtype=torch.uint8).view(4, 1, 1) * 50
    logger.log_video("rollout", video, step=7)
    logger.log_str("note", "hello", step=2)
    logger.close()
    client = mlflow.tracking.MlflowClient(tracking_uri=store)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "exp"
    history = client.get_metric_history(logger.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]
    assert run.data.metrics == {"loss": 0.25, "a": 1.5, "b": 2.0}
    assert run.data.params == {"lr": "0.1", "algo": "ppo"}
    experiment = client.get_experiment(logger.id)
    assert experiment.name == "exp" and experiment.tags["team"] == "rl"
    assert [a.path for a in client.list_artifacts(logger.run_id, "videos")] == [
        "videos/rollout_step_0007.mp4"
    ]
    local = client.download_artifacts(logger.run_id, "videos/rollout_step_0007.mp4")
    frames = decode_mp4(local)
    assert frames.shape == (4, 16, 24, 3)  # the last of the N videos, as TorchRL
    assert abs(int(frames[3, 0, 0, 0]) - 150) <= 3
    text = client.download_artifacts(logger.run_id, "note_2.txt")
    assert open(text).read() == "hello"


def test_two_loggers_log_to_their_own_runs_without_a_global_run(store):
    import mlflow

    first = MLFlowLogger("exp", tracking_uri=store)
    second = MLFlowLogger("exp", tracking_uri=store)  # same experiment, a new run
    first.log_scalar("x", 1.0)
    second.log_scalar("x", 2.0)
    assert mlflow.active_run() is None
    client = mlflow.tracking.MlflowClient(tracking_uri=store)
    assert first.id == second.id and first.run_id != second.run_id
    assert client.get_run(first.run_id).data.metrics == {"x": 1.0}
    assert client.get_run(second.run_id).data.metrics == {"x": 2.0}
    first.close()
    second.close()


def test_errors(store):
    logger = MLFlowLogger("exp", tracking_uri=store)
    with pytest.raises(NotImplementedError, match="MLflow holds no histograms"):
        logger.log_histogram("h", [1.0])
    with pytest.raises(ValueError, match="3 colour channels"):
        logger.log_video("v", torch.zeros(1, 2, 1, 8, 8, dtype=torch.uint8))
    logger.close()
    with pytest.raises(TypeError, match="unknown arguments"):
        MLFlowLogger("exp", tracking_uri=store, colour="red")


def test_missing_mlflow_names_the_extra(monkeypatch, store):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ImportError, match=r"tdrl\[record\]"):
        MLFlowLogger("exp", tracking_uri=store)
