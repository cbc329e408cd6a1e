"""Records TorchRL 0.14.1's Reward2GoTransform and TargetReturn numbers for tdrl's tests.

Run it in the throwaway venv that has torchrl (never a tdrl dependency):

    /tmp/trl-venv/bin/python tools/dt_reference/gen_dt_transforms.py

Writes ``tests/envs/transforms/dt_fixtures/dt_transforms.safetensors`` (read by
tests/envs/transforms/test_reward2go.py): the reward-to-go of seeded rewards and episode ends
(2-d and 1-d batches, several discounts, through ``inv`` and through a replay buffer's
``extend``), and the target returns of a rollout of a small deterministic env (the same env is
written in the test) with partial resets, in both modes.
"""

from __future__ import annotations

import json
import pathlib

import torch
from safetensors.torch import save_file
from tensordict import TensorDict
from torchrl.data import Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from torchrl.envs import EnvBase, Reward2GoTransform, TargetReturn, TransformedEnv

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/envs/transforms/dt_fixtures"


class StepRewardEnv(EnvBase):
    """Batch [2]; observation counts steps, reward = 0.5 * count + 0.25, row i ends at 3 + 2i."""

    def __init__(self) -> None:
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(observation=Unbounded((2, 1)), shape=(2,))
        self.action_spec = Unbounded((2, 1))
        self.reward_spec = Unbounded((2, 1))
        self.limit = torch.tensor([[3.0], [5.0]])

    def _reset(self, tensordict):
        zeros = torch.zeros(2, 1)
        old = None if tensordict is None else tensordict.get("observation", None)
        if old is not None and "_reset" in tensordict.keys():  # TorchRL keeps the other rows
            zeros = torch.where(tensordict["_reset"], zeros, old)
        return TensorDict(observation=zeros, batch_size=[2])

    def _step(self, tensordict):
        obs = tensordict["observation"] + 1
        done = obs >= self.limit
        return TensorDict(
            observation=obs,
            reward=0.5 * obs + 0.25,
            done=done,
            terminated=done.clone(),
            batch_size=[2],
        )

    def _set_seed(self, seed):
        return seed


def reward2go_cases(tensors: dict[str, torch.Tensor]) -> dict:
    meta = {}
    torch.manual_seed(0)
    reward = torch.randn(3, 50, 1)
    done = torch.rand(3, 50, 1) < 0.08
    done[:, 20] = True  # every row holds an end
    done[2, -1] = False  # a row whose last steps belong to an unfinished episode
    tensors["r2g.2d.reward"], tensors["r2g.2d.done"] = reward, done
    for gamma in (1.0, 0.99, 0.5):
        td = TensorDict({"next": {"reward": reward, "done": done}}, [3, 50])
        out = Reward2GoTransform(gamma=gamma, out_keys=["return_to_go"]).inv(td)
        tensors[f"r2g.2d.g{gamma}"] = out["return_to_go"].contiguous()
        # default out_keys: written over the reward
        over = Reward2GoTransform(gamma=gamma).inv(td.clone())
        tensors[f"r2g.2d.g{gamma}.over"] = over["next", "reward"].contiguous()
    reward1 = torch.randn(200, 1)
    done1 = torch.zeros(200, 1, dtype=torch.bool)
    done1[[17, 80, 81, 150]] = True
    tensors["r2g.1d.reward"], tensors["r2g.1d.done"] = reward1, done1
    td = TensorDict({"next": {"reward": reward1, "done": done1}}, [200])
    out = Reward2GoTransform(gamma=0.9, out_keys=[("next", "rtg")]).inv(td)
    tensors["r2g.1d.g0.9"] = out["next", "rtg"].contiguous()
    rb = ReplayBuffer(
        storage=LazyTensorStorage(300),
        transform=Reward2GoTransform(gamma=0.95, out_keys=["return_to_go"]),
    )
    rb.extend(TensorDict({"next": {"reward": reward, "done": done}}, [3, 50]))
    stored = rb[:]
    tensors["r2g.rb.g0.95"] = stored["return_to_go"].contiguous()
    meta["rb_keys"] = sorted(str(k) for k in stored.keys(True, True))
    return meta


def target_return_cases(tensors: dict[str, torch.Tensor]) -> dict:
    meta = {}
    for mode in ("reduce", "constant"):
        env = TransformedEnv(StepRewardEnv(), TargetReturn(10.0, mode=mode))
        meta[f"{mode}.obs_spec"] = sorted(str(k) for k in env.observation_spec.keys(True, True))
        meta[f"{mode}.state_spec"] = sorted(str(k) for k in env.state_spec.keys(True, True))
        meta[f"{mode}.spec_shape"] = list(env.observation_spec["target_return"].shape)
        td = env.rollout(9, break_when_any_done=False)
        tensors[f"tr.{mode}.root"] = td["target_return"].contiguous()
        tensors[f"tr.{mode}.next"] = td["next", "target_return"].contiguous()
        tensors[f"tr.{mode}.reward"] = td["next", "reward"].contiguous()
    return meta


def main() -> None:
    tensors: dict[str, torch.Tensor] = {}
    meta = {**reward2go_cases(tensors), **target_return_cases(tensors)}
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT / "dt_transforms.safetensors"), metadata={"meta": json.dumps(meta)})
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
