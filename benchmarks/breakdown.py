"""Where each microsecond of a step goes: gymnasium rollout step, collector step, step_mdp.

Not a benchmark test (pytest does not collect it): a script that times the phases of the hot
paths one by one, per step, and prints the median of every phase over all steps and rounds (a
median of single steps is not inflated by other processes taking the core now and then; resets
are counted apart and amortised over the steps). Run it with::

    .venv/bin/python benchmarks/breakdown.py

It only calls methods that exist before and after the issue-16 work (the private hooks
``_check_actions``, ``_step``, ``_fill_done``, ``_act``), so the same script measures both trees
(``PYTHONPATH=<other tree> .venv/bin/python benchmarks/breakdown.py``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import torch
from tensordict import TensorDict

from tdrl.collectors import Collector
from tdrl.envs.builtin import CartPoleEnv, MultiAgentNavigationEnv
from tdrl.envs.core import StepMDP, step_mdp
from tdrl.envs.core._rollout import stack
from tdrl.envs.libs import GymEnv

torch.set_num_threads(1)
_ns = time.perf_counter_ns
try:  # how EnvBase.step sets "next" (after the issue-16 work: without tensordict's validation)
    from tdrl.envs.core._fast import set_next as _set_next

    def set_next(td: TensorDict, nxt: TensorDict) -> None:
        _set_next(td, nxt, True)

except ImportError:  # before

    def set_next(td: TensorDict, nxt: TensorDict) -> None:
        td.set("next", nxt)


STEPS, ROUNDS = 200, 40


class Phases:
    """Per-phase samples (ns) of single steps."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self.steps = 0

    def add(self, name: str, ns: float) -> None:
        self.samples.setdefault(name, []).append(ns)

    def report(self, title: str, amortised: tuple[str, ...] = ()) -> None:
        print(f"\n{title} (us per step, median of single steps)")
        total = 0.0
        for name, values in self.samples.items():
            median = statistics.median(values) / 1e3
            if name in amortised:  # happens on some steps only: cost x frequency
                share = len(values) / self.steps
                cost = median * share
                print(f"  {name:30s} {cost:6.2f}   ({median:.1f} us, on {share:.1%} of steps)")
            else:
                cost = median
                print(f"  {name:30s} {cost:6.2f}")
            total += cost
        print(f"  {'total':30s} {total:6.2f}")


def gym_rollout() -> None:
    """GymEnv("CartPole-v1") rollout with categorical actions, and the bare gymnasium step."""
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    actions = torch.randint(0, 2, (STEPS,), generator=torch.Generator().manual_seed(0))
    p = Phases()
    for _ in range(ROUNDS):
        td, steps = env.reset(), []
        for t in range(STEPS):
            a = _ns()
            td.set("action", actions[t])
            b = _ns()
            env._check_actions(td)
            c = _ns()
            nxt = env._step(td)  # action encoding, gymnasium step, numpy->torch, TensorDict
            d = _ns()
            env._fill_done(nxt)
            e = _ns()
            set_next(td, nxt)
            f = _ns()
            root = env.step_mdp(td)
            g = _ns()
            out = env.maybe_reset(root)
            h = _ns()
            done = bool(root.get("done").any())
            p.add("policy (td.set action)", b - a)
            p.add("check actions", c - b)
            p.add("_step (gym step + conversion)", d - c)
            p.add("fill done", e - d)
            p.add("set next", f - e)
            p.add("step_mdp", g - f)
            p.add("reset (when done)" if done else "maybe_reset (not done)", h - g)
            steps.append(td)
            td = out
            p.steps += 1
        a = _ns()
        stack(steps)
        p.samples.setdefault("stack (per step)", []).append((_ns() - a) / STEPS)
    raw = gym.make("CartPole-v1")
    raw.reset(seed=0)
    for t in range(STEPS * ROUNDS):
        a = _ns()
        _, _, term, trunc, _ = raw.step(int(actions[t % STEPS]))
        p.add("  of which gymnasium step", _ns() - a)
        if term or trunc:
            raw.reset()
    gym_alone = p.samples.pop("  of which gymnasium step")
    p.report("GymEnv CartPole-v1 rollout step", amortised=("reset (when done)",))
    print(f"  {'(gymnasium step alone)':30s} {statistics.median(gym_alone) / 1e3:6.2f}")


def gym_rollout_rows() -> None:
    """The same rollout through rows (``RowRun``, what ``env.rollout`` runs for a single
    gymnasium env since the second issue-16 round): the phases of a row step, and the per-run
    costs (the general first step, the set-up, the result) spread over the steps."""
    try:
        from tdrl.envs.core._row_run import RowRun
    except ImportError:  # a tree without rows
        return
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    actions = torch.randint(0, 2, (STEPS,), generator=torch.Generator().manual_seed(0))
    gym_env = env.env
    p = Phases()
    for _ in range(ROUNDS):
        a = _ns()
        td = env.reset().set("action", actions[0])
        first, root = env.step_and_maybe_reset(td)
        b = _ns()
        run = RowRun.start(env, first, root, STEPS, exact=True)
        c = _ns()
        assert run is not None
        p.samples.setdefault("first step (general, per step)", []).append((b - a) / STEPS)
        p.samples.setdefault("set-up (per step)", []).append((c - b) / STEPS)
        for t in range(1, STEPS):
            a = _ns()
            td = root.set("action", actions[t])
            b = _ns()
            run.advance(td, True)  # the gymnasium step is inside: timed alone below
            c = _ns()
            root = run.root()
            d = _ns()
            p.add("policy (td.set action)", b - a)
            p.add("advance (checks + writer)", c - b)
            p.add("root (views + TensorDict)", d - c)
            p.steps += 1
        a = _ns()
        run.result()
        p.samples.setdefault("result (per step)", []).append((_ns() - a) / STEPS)
    gym_env.reset(seed=0)
    alone = []
    for t in range(STEPS * ROUNDS):
        a = _ns()
        _, _, term, trunc, _ = gym_env.step(int(actions[t % STEPS]))
        alone.append(_ns() - a)
        if term or trunc:
            gym_env.reset()
    p.report("GymEnv CartPole-v1 rollout step through rows")
    print(f"  {'(gymnasium step alone)':30s} {statistics.median(alone) / 1e3:6.2f}")


def collector_step() -> None:
    """Collector(GymEnv("Pendulum-v1")) with random actions, one batch of 200 steps."""
    collector = Collector(GymEnv("Pendulum-v1"), None, frames_per_batch=STEPS)
    next(iter(collector))
    env, buf, ids = collector.env, collector._buffer, collector._ids
    store = getattr(buf, "record", None) or buf.write  # record+flush after, write before
    p = Phases()
    root = collector._root
    with torch.no_grad():
        for _ in range(ROUNDS):
            for t in range(STEPS):
                a = _ns()
                td = collector._act(root)
                b = _ns()
                td = env.step(td)
                c = _ns()
                store(td, t, [i.ids for i in ids])
                d = _ns()
                nxt = env.step_mdp(td)
                e = _ns()
                ids[0].renew(td)
                f = _ns()
                root = env.maybe_reset(nxt)
                g = _ns()
                for name, ns in (
                    ("random action", b - a),
                    ("env.step (incl. gymnasium)", c - b),
                    ("store the step", d - c),
                    ("step_mdp", e - d),
                    ("trajectory ids", f - e),
                    ("maybe_reset (+ resets)", g - f),
                ):
                    p.add(name, ns)
                p.steps += 1
            a = _ns()
            if hasattr(buf, "flush"):
                buf.flush()
            buf.clone()  # the copy the iterator yields
            p.samples.setdefault("flush + batch copy (per step)", []).append((_ns() - a) / STEPS)
    p.report("Collector(GymEnv Pendulum-v1), random actions")
    collector.shutdown()


def _time(fn: Callable[[], object], n: int = 2000) -> float:
    best = float("inf")
    for _ in range(15):
        a = _ns()
        for _ in range(n):
            fn()
        best = min(best, (_ns() - a) / n)
    return best / 1e3


def _step_mdp_rows(name: str, env: object) -> None:
    td = env.step(env.rand_action(env.reset()))  # type: ignore[attr-defined]
    keys = {"reward_keys": env.reward_keys, "done_keys": env.done_keys}  # type: ignore[attr-defined]
    actions = env.action_keys  # type: ignore[attr-defined]
    nxt = td.get("next")
    flat = dict(nxt.items())
    parts = {
        "env.step_mdp (precomputed plan)": lambda: env.step_mdp(td),  # type: ignore[attr-defined]
        "step_mdp() free function": lambda: step_mdp(td, action_keys=actions, **keys),
        "  of which: building a plan": lambda: StepMDP(action_keys=actions, **keys),
        "  of which: one TensorDict": lambda: TensorDict._new_unsafe(
            flat, batch_size=nxt.batch_size
        ),
    }
    print(f"  {name}")
    for part, fn in parts.items():
        print(f"    {part:34s} {_time(fn):6.2f}")


def step_mdp_parts() -> None:
    """step_mdp on stepped data (batch 32): the env plan, the free function, their parts."""
    print("\nstep_mdp (us per call, best of 15 x 2000 calls)")
    _step_mdp_rows("flat CartPoleEnv", CartPoleEnv(batch_size=(32,)))
    _step_mdp_rows(
        "nested MultiAgentNavigationEnv", MultiAgentNavigationEnv(batch_size=(32,), n_agents=4)
    )


if __name__ == "__main__":
    gym_rollout()
    gym_rollout_rows()
    collector_step()
    step_mdp_parts()
