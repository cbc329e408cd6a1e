"""Samplers: what they infer (SliceSampler keys), priorities, sampling without replacement.

Sampled indices are random in both libraries (and draw from the RNG differently), so the
scenarios record what is determined: shapes, keys, the set covered by an epoch, the weight
each index gets, the slice structure.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..registry import capture, scenario


def _episodes(lengths: list[int], *, with_done: bool, with_episode: bool) -> TensorDict:
    """Flat steps of consecutive episodes of the given lengths."""
    episode = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    td = TensorDict({"step": step, "obs": episode * 100 + step}, batch_size=[len(step)])
    if with_done:
        done = torch.cat([torch.arange(n) == n - 1 for n in lengths]).unsqueeze(-1)
        td["next"] = TensorDict({"done": done, "terminated": done.clone()}, [len(step)])
    if with_episode:
        td["episode"] = episode
    return td


def _slice_sample(lib: Any, data: TensorDict, **kwargs: Any) -> Any:
    kwargs.setdefault("num_slices", 2)
    sampler = lib.data.SliceSampler(**kwargs)
    rb = lib.data.TensorDictReplayBuffer(
        storage=lib.data.LazyTensorStorage(32), sampler=sampler, batch_size=6
    )
    rb.extend(data)
    sample = rb.sample()
    out: dict[str, Any] = {"shape": list(sample.shape)}
    # what the sampler inferred (TorchRL sets these attributes on the first sample)
    out["traj_key"] = capture(lambda: str(sampler.traj_key))
    out["end_key"] = capture(lambda: str(sampler.end_key))
    out["keys"] = sorted(map(str, sample.keys(True, True)))
    obs = sample["obs"].reshape(kwargs["num_slices"], -1)
    # each slice: one episode, consecutive steps
    out["slices_in_one_episode"] = bool((obs // 100 == obs[:, :1] // 100).all())
    out["slices_consecutive"] = bool((obs.diff(dim=-1) == 1).all())
    for key in (("next", "truncated"), ("next", "done"), "truncated"):
        if key in sample.keys(True):
            out[str(key)] = sample[key].reshape(kwargs["num_slices"], -1)
    return out


@scenario("samplers/SliceSampler/infer_end_key")
def _(lib: Any) -> Any:
    data = _episodes([5, 6, 7], with_done=True, with_episode=False)
    return capture(lambda: _slice_sample(lib, data))


@scenario("samplers/SliceSampler/infer_traj_key")
def _(lib: Any) -> Any:
    data = _episodes([5, 6, 7], with_done=False, with_episode=True)
    return capture(lambda: _slice_sample(lib, data))


@scenario("samplers/SliceSampler/both_keys")
def _(lib: Any) -> Any:
    data = _episodes([5, 6, 7], with_done=True, with_episode=True)
    return capture(lambda: _slice_sample(lib, data))


@scenario("samplers/SliceSampler/no_key")
def _(lib: Any) -> Any:
    data = _episodes([5, 6, 7], with_done=False, with_episode=False)
    return capture(lambda: _slice_sample(lib, data))


@scenario("samplers/SliceSampler/explicit_traj_key")
def _(lib: Any) -> Any:
    data = _episodes([5, 6, 7], with_done=False, with_episode=True)
    data["run"] = data.pop("episode")
    return capture(lambda: _slice_sample(lib, data, traj_key="run"))


@scenario("samplers/SliceSampler/slice_len")
def _(lib: Any) -> Any:
    data = _episodes([5, 6, 7], with_done=True, with_episode=False)
    return capture(lambda: _slice_sample(lib, data, num_slices=None, slice_len=3))


@scenario("samplers/SliceSampler/both_num_slices_and_slice_len")
def _(lib: Any) -> Any:
    return capture(lambda: lib.data.SliceSampler(num_slices=2, slice_len=3))


@scenario("samplers/SliceSampler/short_episodes_strict")
def _(lib: Any) -> Any:
    data = _episodes([2, 2, 9], with_done=True, with_episode=False)
    return capture(lambda: _slice_sample(lib, data, num_slices=2))


def _without_replacement(lib: Any, n: int, batch: int, **kwargs: Any) -> Any:
    rb = lib.data.ReplayBuffer(
        storage=lib.data.LazyTensorStorage(n),
        sampler=lib.data.SamplerWithoutReplacement(**kwargs),
        batch_size=batch,
    )
    rb.extend(torch.arange(n))
    draws = [capture(lambda: rb.sample().tolist()) for _ in range(2 * (n // batch + 1))]
    sizes = [len(d) if isinstance(d, list) else d for d in draws]
    seen = [sorted(d) for d in draws if isinstance(d, list)]
    flat = [v for d in seen for v in d]
    return {"sizes": sizes, "first_epoch": sorted(flat[:n]), "n_draws": len(draws)}


@scenario("samplers/SamplerWithoutReplacement/exact")
def _(lib: Any) -> Any:
    return _without_replacement(lib, 6, 2)


@scenario("samplers/SamplerWithoutReplacement/remainder")
def _(lib: Any) -> Any:
    return _without_replacement(lib, 5, 2)


@scenario("samplers/SamplerWithoutReplacement/drop_last")
def _(lib: Any) -> Any:
    return _without_replacement(lib, 5, 2, drop_last=True)


def _prioritized(lib: Any, alpha: float, beta: float, priorities: list[float]) -> Any:
    n = len(priorities)
    rb = lib.data.TensorDictReplayBuffer(
        storage=lib.data.LazyTensorStorage(n),
        sampler=lib.data.PrioritizedSampler(n, alpha=alpha, beta=beta),
        batch_size=256,
    )
    rb.extend(TensorDict({"obs": torch.arange(n)}, [n]))
    before = rb.sample()
    out: dict[str, Any] = {"keys": sorted(map(str, before.keys(True, True)))}
    out["weights_before"] = _weights_by_index(before)
    out["default_priority_before"] = capture(lambda: float(rb.sampler.default_priority))
    rb.update_priority(torch.arange(n), torch.tensor(priorities))
    out["default_priority_after"] = capture(lambda: float(rb.sampler.default_priority))
    after = rb.sample()
    out["weights_after"] = _weights_by_index(after)
    out["all_sampled"] = sorted(set(after["index"].tolist())) == list(range(n))
    return out


def _weights_by_index(sample: Any) -> Any:
    key = next((k for k in ("priority_weight", "_weight") if k in sample.keys()), None)
    if key is None:
        return None
    index, weight = sample["index"], sample[key]
    return {str(i): float(weight[index == i][0]) for i in sorted(set(index.tolist()))}


@scenario("samplers/PrioritizedSampler/alpha0.7_beta0.5")
def _(lib: Any) -> Any:
    return _prioritized(lib, 0.7, 0.5, [1.0, 2.0, 3.0, 4.0])


@scenario("samplers/PrioritizedSampler/zero_priority")
def _(lib: Any) -> Any:
    return _prioritized(lib, 1.0, 1.0, [0.0, 1.0, 1.0, 2.0])


@scenario("samplers/PrioritizedReplayBuffer/defaults")
def _(lib: Any) -> Any:
    rb = lib.data.TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=lib.data.LazyTensorStorage(4), batch_size=256
    )
    rb.extend(TensorDict({"obs": torch.arange(4), "td_error": torch.arange(4.0) + 1}, [4]))
    sample = rb.sample()
    return {
        "keys": sorted(map(str, sample.keys(True, True))),
        "weights": _weights_by_index(sample),
    }


@scenario("samplers/SliceSampler/ndim=2_storage")
def _(lib: Any) -> Any:
    """[env, time] data in an ndim=2 storage: slices must not cross envs or episodes."""
    done = torch.zeros(2, 8, 1, dtype=torch.bool)
    done[0, 3] = done[0, 7] = done[1, 7] = True
    obs = torch.arange(16).reshape(2, 8)
    data = TensorDict(
        {"obs": obs, "next": {"done": done, "terminated": done.clone()}}, batch_size=[2, 8]
    )
    rb = lib.data.TensorDictReplayBuffer(
        storage=lib.data.LazyTensorStorage(16, ndim=2),
        sampler=lib.data.SliceSampler(slice_len=2),
        batch_size=8,
    )

    def run() -> Any:
        rb.extend(data)
        sample = rb.sample()
        pairs = sample["obs"].reshape(-1, 2)
        return {
            "shape": list(sample.shape),
            "consecutive": bool((pairs[:, 1] - pairs[:, 0] == 1).all()),
            "same_env": bool((pairs[:, 0] // 8 == pairs[:, 1] // 8).all()),
        }

    return capture(run)


@scenario("samplers/writers/TensorDictMaxValueWriter")
def _(lib: Any) -> Any:
    rb = lib.data.TensorDictReplayBuffer(
        storage=lib.data.LazyTensorStorage(3),
        writer=lib.data.TensorDictMaxValueWriter(rank_key="score"),
        batch_size=3,
    )
    for chunk in ([5.0, 1.0], [3.0, 7.0], [0.5, 6.0]):
        scores = torch.tensor(chunk)
        rb.extend(TensorDict({"score": scores, "obs": scores * 10}, [2]))
    kept = rb[:]
    return {"len": len(rb), "scores": sorted(kept["score"].tolist())}


@scenario("samplers/writers/RoundRobinWriter")
def _(lib: Any) -> Any:
    rb = lib.data.ReplayBuffer(
        storage=lib.data.LazyTensorStorage(3), writer=lib.data.RoundRobinWriter()
    )
    indices = [rb.extend(torch.arange(i * 2, i * 2 + 2)) for i in range(3)]
    return {"indices": indices, "all": rb[:]}


@scenario("samplers/PrioritizedReplayBuffer/update_tensordict_priority")
def _(lib: Any) -> Any:
    rb = lib.data.TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=lib.data.LazyTensorStorage(4), batch_size=4
    )
    rb.extend(TensorDict({"obs": torch.arange(4)}, [4]))
    # as after a loss wrote td_error into a sample of every index: priority = index + 1
    update = TensorDict({"index": torch.arange(4), "td_error": torch.arange(4.0) + 1}, [4])
    rb.update_tensordict_priority(update)
    after = rb.sample(256)
    return {"weights": _weights_by_index(after)}
