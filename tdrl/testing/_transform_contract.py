"""The transform contract: checks every transform passes, and the env they run on.

Write a test class that subclasses :class:`TransformContract` (its name must start with
``Test``) and implement :meth:`TransformContract.make_transform`. Every check runs for each
layout (``"flat"``: root keys only; ``"nested"``: a root group and a per-agent ``"agents"``
group), each batch size and each :class:`EnvFactory` of :data:`ENV_FACTORIES`.

Env factories say how the env under test is built around a sub-env maker: a single env,
``SerialEnv(2, make)`` and ``ParallelEnv(2, make)`` (fork). More can be appended, e.g.::

    ENV_FACTORIES.append(EnvFactory("serial3", lambda make: SerialEnv(3, make), batched=True))

Batched factories run the contract twice: with the transform outside (``TransformedEnv``
around the batched env) and inside every worker (the batched env of ``TransformedEnv``\\ s).

Examples:
    >>> from tdrl.envs.core import check_env_specs
    >>> check_env_specs(TransformTestEnv(batch_size=(2,), nested=True))
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs import (
    Compose,
    EnvBase,
    ParallelEnv,
    SerialEnv,
    Transform,
    TransformedEnv,
    check_env_specs,
)
from tdrl.specs import Bounded, Categorical, Composite, Unbounded

__all__ = ["ENV_FACTORIES", "EnvFactory", "TransformContract", "TransformTestEnv"]


@dataclass(frozen=True)
class EnvFactory:
    """One way to build the env a transform runs on.

    Attributes:
        name: shown in the test ids.
        build: takes a zero-argument maker of the sub-env and returns the env under test.
        batched: the env holds several sub-envs (the transform is also tested inside them).
    """

    name: str
    build: Callable[[Callable[[], EnvBase]], EnvBase]
    batched: bool = False


ENV_FACTORIES: list[EnvFactory] = [
    EnvFactory("single", lambda make: make()),
    EnvFactory("serial", lambda make: SerialEnv(2, make), batched=True),
    # fork: starting workers costs ~0.1 s instead of seconds with spawn
    EnvFactory("parallel", lambda make: ParallelEnv(2, make, mp_start_method="fork"), batched=True),
]


class TransformTestEnv(EnvBase):
    """A small deterministic env with internal state, for transform tests.

    Every member counts its steps ``t`` (kept in the env, not read from the data, so transforms
    may change any observation). Flat layout: ``observation`` ``[*B, 3]`` = ``(t, 2t, -t) + .5``,
    ``obs64`` float64 ``[*B, 2]``, ``pixels`` uint8 ``[*B, 6, 8, 3]``, ``action_mask`` ``[*B, 4]``
    (action ``k`` legal when ``k <= t % 4``), actions ``action`` (Categorical(4)) and ``force``
    (float64 ``[*B, 1]``), reward ``t + action / 10``; member ``i`` (flat index) terminates at
    ``max_steps + i % 2``. Nested layout: root ``observation``/``reward`` and an ``"agents"``
    group of two agents (``[*B, 2, ...]`` entries, per-agent done leaves, ``("agents",
    "action")`` Categorical(4) with its ``("agents", "action_mask")``); agent ``j`` terminates at
    ``max_steps - 1 + j``, the root at ``max_steps + 2`` (a root reset resets the agents).

    Args:
        batch_size: leading dims.
        nested: use the nested layout.
        max_steps: base episode length.
        device: data device.

    Examples:
        >>> env = TransformTestEnv(batch_size=(2,), max_steps=2)
        >>> env.rollout(5, break_when_any_done=False)["next", "done"][..., 0].tolist()
        [[False, True, False, True, False], [False, False, True, False, False]]
    """

    def __init__(
        self,
        batch_size: Sequence[int] = (),
        *,
        nested: bool = False,
        max_steps: int = 3,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        b, dev = tuple(self.batch_size), self.device
        self.nested = nested
        n = max(1, self.batch_size.numel())
        extra = (torch.arange(n, device=dev) % 2).reshape(b)
        self._limit = (
            (max_steps + extra) if not nested else torch.full(b, max_steps + 2, device=dev)
        )
        self._agent_limit = torch.tensor([max_steps - 1, max_steps], device=dev).reshape(2, 1)
        self._t = torch.zeros(b, dtype=torch.int64, device=dev)
        self._ta = torch.zeros((*b, 2, 1), dtype=torch.int64, device=dev)
        obs = Composite(observation=Unbounded(shape=(*b, 3), device=dev), shape=b, device=dev)
        act = Composite(shape=b, device=dev)
        if nested:
            agents: dict[str, Any] = {
                "observation": Unbounded(shape=(*b, 2, 3), device=dev),
                "action_mask": Categorical(2, shape=(*b, 2, 4), dtype=torch.bool, device=dev),
            }
            obs["agents"] = Composite(agents, shape=(*b, 2), device=dev)
            act["agents"] = Composite(
                action=Categorical(4, shape=(*b, 2), device=dev), shape=(*b, 2), device=dev
            )
            flag = Categorical(2, shape=(*b, 2, 1), dtype=torch.bool, device=dev)
            done = self.default_done_spec()
            done["agents"] = Composite(
                done=flag, terminated=flag.clone(), shape=(*b, 2), device=dev
            )
            reward = Composite(reward=Unbounded(shape=(*b, 1), device=dev), shape=b, device=dev)
            reward[("agents", "reward")] = Unbounded(shape=(*b, 2, 1), device=dev)
        else:
            obs["obs64"] = Unbounded(shape=(*b, 2), dtype=torch.float64, device=dev)
            obs["pixels"] = Bounded(0, 255, shape=(*b, 6, 8, 3), dtype=torch.uint8, device=dev)
            obs["action_mask"] = Categorical(2, shape=(*b, 4), dtype=torch.bool, device=dev)
            act["action"] = Categorical(4, shape=b, device=dev)
            act["force"] = Bounded(-1.0, 1.0, shape=(*b, 1), dtype=torch.float64, device=dev)
            done = self.default_done_spec()
            reward = Composite(reward=Unbounded(shape=(*b, 1), device=dev), shape=b, device=dev)
        self.full_observation_spec = obs
        self.full_action_spec = act
        self.full_reward_spec = reward
        self.full_done_spec = done

    def _observe(self) -> TensorDict:
        t = self._t.unsqueeze(-1).float()
        out = TensorDict(
            observation=torch.cat([t, 2 * t, -t], -1) + 0.5,
            batch_size=self.batch_size,
            device=self.device,
        )
        k = torch.arange(4, device=self.device)
        if self.nested:
            ta = self._ta.float()
            scale = torch.tensor([[1.0], [2.0]], device=self.device)
            out["agents"] = TensorDict(
                observation=torch.cat([ta, ta * scale, torch.ones_like(ta)], -1),
                action_mask=k <= (self._ta % 4),
                batch_size=(*self.batch_size, 2),
            )
            out[("agents", "terminated")] = self._ta >= self._agent_limit
        else:
            out["obs64"] = torch.cat([t, t * t], -1).double()
            pix = torch.arange(6 * 8 * 3, device=self.device).reshape(6, 8, 3)
            out["pixels"] = ((self._t.reshape(*self.batch_size, 1, 1, 1) * 7 + pix) % 256).to(
                torch.uint8
            )
            out["action_mask"] = k <= (self._t.unsqueeze(-1) % 4)
        out["terminated"] = (self._t >= self._limit).unsqueeze(-1)
        return out

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        b = self.batch_size
        root = tensordict.get("_reset", None) if tensordict is not None else None
        if tensordict is None or all(tensordict.get(k, None) is None for k in self.reset_keys):
            tensordict = None  # no _reset entry: a full reset
            root = torch.ones((*b, 1), dtype=torch.bool, device=self.device)
        elif root is None:
            root = torch.zeros((*b, 1), dtype=torch.bool, device=self.device)
        self._t = torch.where(root.reshape(b), 0, self._t)
        if self.nested:
            agents = tensordict.get(("agents", "_reset"), None) if tensordict is not None else None
            mask = root.reshape(*b, 1, 1).expand(*b, 2, 1)
            mask = mask if agents is None else mask | agents
            self._ta = torch.where(mask, 0, self._ta)
        return self._observe()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._t = self._t + 1
        if self.nested:
            self._ta = self._ta + 1
            act = tensordict.get(("agents", "action")).unsqueeze(-1).float()
        else:
            act = tensordict.get("action").unsqueeze(-1).float()
        out = self._observe()
        t = self._t.unsqueeze(-1).float()
        if self.nested:
            out["reward"] = t
            out[("agents", "reward")] = self._ta.float() + act / 10
        else:
            out["reward"] = t + act / 10
            out["obs64"] = out["obs64"] + tensordict.get("force")
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.seed = seed


class TransformContract:
    """Checks every transform passes; subclass it in a ``Test*`` class.

    Implement :meth:`make_transform` (a fresh transform for a layout). Optional: ``layouts``,
    ``batch_sizes``, ``partial_resets`` (False: a partial reset must raise), ``forward_mode`` (``"env"``: ``forward`` on the root and on ``"next"`` of a rollout of the base env
    gives what the TransformedEnv gives; ``"raises"``: ``forward`` raises ``RuntimeError``
    because the transform only works inside an env; ``"custom"``: override
    :meth:`check_forward`) and :meth:`make_env`.
    """

    layouts: tuple[str, ...] = ("flat", "nested")
    batch_sizes: tuple[tuple[int, ...], ...] = ((), (2, 3))
    forward_mode: str = "env"
    partial_resets: bool = True
    steps: int = 5

    # ------------------------------------------------------------------ to implement
    def make_transform(self, layout: str) -> Transform:
        """A fresh transform for ``layout``."""
        raise NotImplementedError

    def make_env(self, layout: str, batch_size: tuple[int, ...]) -> EnvBase:
        """The base env (default: :class:`TransformTestEnv`)."""
        return TransformTestEnv(batch_size, nested=layout == "nested")

    def check_forward(
        self, transform: Transform, base_rollout: TensorDictBase, env_rollout: TensorDictBase
    ) -> None:
        """For ``forward_mode = "custom"``: check ``transform(base_rollout)``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ parametrisation
    def pytest_generate_tests(self, metafunc: Any) -> None:
        names = metafunc.fixturenames
        if "layout" in names:
            metafunc.parametrize("layout", self.layouts)
        if "factory" in names:
            # Batched factories start workers: they run with the last batch size only (a
            # sub-batch inside each worker), which keeps the suite fast.
            batched_only = metafunc.function.__name__ == "test_contract_inside_batched_env"
            combos = [
                (f, b)
                for f in ENV_FACTORIES
                if f.batched or not batched_only
                for b in (self.batch_sizes[-1:] if f.batched else self.batch_sizes)
            ]
            ids = [f"{f.name}-{b}" for f, b in combos]
            metafunc.parametrize("factory,batch_size", combos, ids=ids)
        elif "batch_size" in names:
            metafunc.parametrize("batch_size", self.batch_sizes, ids=str)

    def _env(self, layout: str, batch_size: tuple[int, ...], compose: int = 0) -> TransformedEnv:
        transform = self.make_transform(layout)
        for _ in range(compose):
            transform = Compose(transform)
        # wrapped once more, so that _under_test(env) is the transform under test
        return TransformedEnv(self.make_env(layout, batch_size), Compose(transform))

    def _rollout(self, env: EnvBase, seed: int = 0) -> TensorDictBase:
        torch.manual_seed(seed)
        return env.rollout(self.steps, break_when_any_done=False)

    # ------------------------------------------------------------------ the checks
    def test_contract_env_specs(self, factory: EnvFactory, layout: str, batch_size: Any) -> None:
        base = factory.build(lambda: self.make_env(layout, batch_size))
        env = TransformedEnv(base, self.make_transform(layout))
        check_env_specs(env)
        td = self._rollout(env)
        assert td.batch_size[-1] == self.steps
        env.close()

    def test_contract_inside_batched_env(
        self, factory: EnvFactory, layout: str, batch_size: Any
    ) -> None:
        env = factory.build(
            lambda: TransformedEnv(self.make_env(layout, batch_size), self.make_transform(layout))
        )
        check_env_specs(env)
        env.close()

    def test_contract_compose(self, layout: str, batch_size: Any) -> None:
        plain = TransformedEnv(self.make_env(layout, batch_size), self.make_transform(layout))
        plain_td = self._rollout(plain)
        composed = self._rollout(self._env(layout, batch_size, compose=1))
        assert set(composed.keys(True, True)) == set(plain_td.keys(True, True))
        for key in plain_td.keys(True, True):
            torch.testing.assert_close(composed[key], plain_td[key], msg=f"key {key}")

    def test_contract_spec_data_agreement(self, layout: str, batch_size: Any) -> None:
        env = self._env(layout, batch_size)
        td = env.reset()
        for kind in ("observation", "done"):
            spec = getattr(env, f"full_{kind}_spec")
            for key in spec.keys(True, True):
                assert spec[key].is_in(td[key]), f"{kind} spec of {key!r} rejects the reset data"
        td = env.step(env.rand_action(td))["next"]
        for kind in ("observation", "reward", "done"):
            spec = getattr(env, f"full_{kind}_spec")
            for key in spec.keys(True, True):
                assert spec[key].is_in(td[key]), f"{kind} spec of {key!r} rejects the step data"

    def test_contract_forward(self, layout: str, batch_size: Any) -> None:
        env = self._env(layout, batch_size)
        transform = _under_test(env)
        if self.forward_mode == "raises":
            base = self._rollout(self.make_env(layout, batch_size))
            with pytest.raises(RuntimeError, match=type(transform).__name__):
                transform(base)
            return
        expected = self._rollout(env)
        # replay the env's actions (mapped back by the transform) on a fresh base env
        inner = transform.inv(expected.select(*env.action_keys))
        steps = iter(inner.unbind(len(env.batch_size)))

        def replay(td: TensorDictBase) -> TensorDictBase:
            return td.update(next(steps))

        base = self.make_env(layout, batch_size).rollout(
            self.steps, replay, break_when_any_done=False
        )
        if self.forward_mode == "custom":
            self.check_forward(transform, base, expected)
            return
        # forward maps the keys as given (TorchRL): the root and "next" are mapped apart
        root, nxt = base.exclude("next"), base.get("next").clone()
        if all(root.get(k, None) is not None for k in transform.in_keys):
            root = transform(root)
        if all(nxt.get(k, None) is not None for k in transform.in_keys):
            nxt = transform(nxt)
        got = root.set("next", nxt)
        for key in expected.keys(True, True):
            if key in got.keys(True, True) and not _is_action(key, env):
                torch.testing.assert_close(got[key], expected[key], msg=f"key {key}")
        missing = set(expected.keys(True, True)) - set(got.keys(True, True))
        extra = set(got.keys(True, True)) - set(expected.keys(True, True))
        assert not missing, f"forward does not produce {sorted(map(str, missing))}"
        assert not extra, f"forward produces {sorted(map(str, extra))}, the env does not"

    def _check_partial_reset_flat(self, batch_size: Any) -> None:
        """Flat layout: a root ``_reset`` for the first member keeps every other member's data."""
        env = self._env("flat", batch_size)
        torch.manual_seed(0)
        td = env.step_mdp(env.step(env.rand_action(env.reset())))
        b = tuple(env.batch_size)
        mask = torch.zeros(env.full_done_spec["done"].shape, dtype=torch.bool)
        if b:
            mask[(0,) * len(b)] = True
        td.set("_reset", mask)
        if not self.partial_resets:
            # transforms that cannot reset part of a batch must say so, naming themselves
            with pytest.raises(RuntimeError, match=type(_under_test(env)).__name__):
                env.reset(td.clone())
            return
        out = env.reset(td.clone())
        member = mask.reshape(*b, -1).any(-1)
        for key in out.keys(True, True):
            old = td.get(key, None)
            if old is None:
                continue
            keep = ~member.reshape(*b, *([1] * (old.ndim - len(b)))).expand(old.shape)
            torch.testing.assert_close(out[key][keep], old[keep], msg=f"key {key}")

    def test_contract_partial_reset_keeps_other_groups(self, batch_size: Any) -> None:
        if "nested" not in self.layouts:
            self._check_partial_reset_flat(batch_size)
            return
        env = self._env("nested", batch_size)
        torch.manual_seed(0)
        td = env.step_mdp(env.step(env.rand_action(env.reset())))
        b = tuple(env.batch_size)
        mask = torch.zeros((*b, 2, 1), dtype=torch.bool)
        mask[(0,) * len(b) + (0, 0)] = True
        td.set(("agents", "_reset"), mask)
        out = env.reset(td.clone())
        for key in out.keys(True, True):
            old = td.get(key, None)
            if old is None:
                continue
            new = out[key]
            if isinstance(key, tuple) and key[0] == "agents":
                keep = ~mask.reshape(*b, 2, *([1] * (new.ndim - len(b) - 1))).expand(new.shape)
                torch.testing.assert_close(new[keep], old[keep], msg=f"key {key}")
            else:
                torch.testing.assert_close(new, old, msg=f"key {key}")

    def test_contract_state_dict_roundtrip(self, layout: str, batch_size: Any) -> None:
        env = self._env(layout, batch_size)
        self._rollout(env)
        state = env.state_dict()
        other = self._env(layout, batch_size)
        other.load_state_dict(state)
        again = other.state_dict()
        assert set(again) == set(state)
        for key, value in state.items():
            torch.testing.assert_close(again[key], value, msg=f"state entry {key}")

    def test_contract_pickle_and_copy(self, layout: str, batch_size: Any) -> None:
        env = self._env(layout, batch_size)
        clones: list[TransformedEnv] = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
        for clone in clones:
            assert _under_test(clone).container is clone
            assert clone.full_observation_spec == env.full_observation_spec
            assert clone.full_state_spec == env.full_state_spec
            clone.rollout(2)


def _is_action(key: Any, env: EnvBase) -> bool:
    inner = key[1:] if isinstance(key, tuple) and key[0] == "next" else key
    inner = inner[0] if isinstance(inner, tuple) and len(inner) == 1 else inner
    return inner in env.action_keys


def _under_test(env: TransformedEnv) -> Transform:
    """The transform under test: the first one of the Compose ``_env`` wraps it in."""
    composed = env.transform
    assert isinstance(composed, Compose)
    return composed[0]
