"""One whole off-policy gradient step, tdrl beside plain PyTorch (issue 27).

Each group (``update dqn``, ``update sac``, ``update td3``) times the step a user's training
loop runs after collecting, from a prioritized replay buffer pre-filled with 100,000
transitions (random priorities, ``alpha=0.6``, ``beta=0.4``)::

    batch = rb.sample()                        # + "index", "priority_weight"
    loss_td = loss(batch)                      # weighted by "priority_weight", writes "td_error"
    optim.zero_grad(); sum(loss_td["loss_*"]).backward(); optim.step()   # fused Adam
    updater.step()                             # SoftUpdate(loss, tau=0.005)
    rb.update_tensordict_priority(batch)

- ``tdrl``: ``TensorDictPrioritizedReplayBuffer(storage=LazyTensorStorage(100_000))``, the
  tdrl loss, ``SoftUpdate``, eager;
- ``tdrl-compiled`` (DQN and SAC): the same with ``loss.compile()`` (what ``tdrl train
  --compile`` does: inductor, compiled before the timed rounds); sampling, the optimiser step,
  the target and priority updates stay eager. Compare it with ``plain`` (eager);
- ``plain``: the same step by hand: the buffer's columns as plain tensors gathered with
  ``index_select``, a two-level sum/min tree in plain torch (``plain_sumtree.BlockTree``), the
  same networks (copies of the tdrl loss's weights) and maths, ``torch._foreach_lerp_`` for the
  target networks.

Run::

    .venv/bin/python -m pytest benchmarks/test_update_step.py --benchmark-enable -p no:randomly
    .venv/bin/python benchmarks/test_update_step.py    # us per part of the step, and the trees

The tests at the end (not benchmarks) check that the plain trees sample the same elements with
the same importance weights as tdrl's ``PrioritizedSampler``, and that one plain step computes
what one tdrl step computes (loss, parameters, targets, priorities).

Sizes: DQN has CartPole's (4 observations, 2 actions, 2 x 64 ReLU MLP, batch 128); SAC and TD3
17 observations, 6 actions, 256 x 256 ReLU MLPs, 2 critics, batch 256. Every loss uses the
squared error. Rounds are timed in process CPU time (``time.process_time``), one thread.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import sys
import time
from typing import NamedTuple

import pytest
import torch
from offpolicy_plain import tanh_normal  # benchmarks/: pytest and python add it to sys.path
from plain_sumtree import BinaryTree, BlockTree
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import Tensor, nn
from torch.func import functional_call

from tdrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictPrioritizedReplayBuffer
from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal
from tdrl.objectives import DQNLoss, LossModule, SACLoss, SoftUpdate, TD3Loss

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.benchmark(
        timer=time.process_time, max_time=2.0, min_rounds=20, warmup=True, warmup_iterations=5
    ),
    # inductor builds C++ on a cold cache: tens of seconds per case, more on a busy machine
    pytest.mark.timeout(300),
]

CAPACITY, ALPHA, BETA, TAU, GAMMA, LR = 100_000, 0.6, 0.4, 0.005, 0.99, 1e-4


@dataclasses.dataclass(frozen=True)
class Sizes:
    obs: int
    act: int
    hidden: int
    batch: int
    discrete: bool = False


SIZES = {
    "dqn": Sizes(4, 2, 64, 128, True),
    "sac": Sizes(17, 6, 256, 256),
    "td3": Sizes(17, 6, 256, 256),
}
TERMS = {
    "dqn": ["loss"],
    "sac": ["loss_actor", "loss_qvalue", "loss_alpha"],
    "td3": ["loss_actor", "loss_qvalue"],
}


@pytest.fixture(autouse=True)
def _fresh_compile_caches():
    """Each benchmark compiles from empty caches (see test_losses_compile.py)."""
    torch._dynamo.reset()


# ----------------------------------------------------------------- data and networks
def transitions(sizes: Sizes, n: int = CAPACITY) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    if sizes.discrete:
        action = torch.randint(sizes.act, (n,), generator=g)
    else:
        action = torch.rand(n, sizes.act, generator=g) * 1.8 - 0.9
    terminated = torch.rand(n, 1, generator=g) < 0.05
    nxt = {
        "observation": torch.randn(n, sizes.obs, generator=g),
        "reward": torch.randn(n, 1, generator=g),
        "done": terminated.clone(),
        "terminated": terminated,
    }
    obs = torch.randn(n, sizes.obs, generator=g)
    return TensorDict({"observation": obs, "action": action, "next": nxt}, [n])


def priorities(n: int = CAPACITY) -> Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(2)) * 10


def mlp(n_in: int, n_out: int, hidden: int) -> MLP:
    return MLP(n_in, n_out, num_cells=[hidden, hidden], activation_class=nn.ReLU)


def tdrl_loss(algo: str) -> LossModule:
    s = SIZES[algo]
    if algo == "dqn":
        net = TensorDictModule(mlp(s.obs, s.act, s.hidden), ["observation"], ["action_value"])
        loss: LossModule = DQNLoss(net, action_space="categorical", loss_function="l2")
    else:
        critic = TensorDictModule(
            mlp(s.obs + s.act, 1, s.hidden), ["observation", "action"], ["state_action_value"]
        )
    if algo == "sac":
        net = nn.Sequential(mlp(s.obs, 2 * s.act, s.hidden), NormalParamExtractor())
        module = TensorDictModule(net, ["observation"], ["loc", "scale"])
        actor = ProbabilisticActor(module, ["loc", "scale"], distribution_class=TanhNormal)
        loss = SACLoss(actor, critic, loss_function="l2")
    elif algo == "td3":
        actor_net = nn.Sequential(mlp(s.obs, s.act, s.hidden), nn.Tanh())
        actor = TensorDictModule(actor_net, ["observation"], ["action"])
        loss = TD3Loss(actor, critic, bounds=(-1.0, 1.0), loss_function="l2")
    return loss.make_value_estimator(gamma=GAMMA)


def plain_copy(module: nn.Module, params: TensorDict) -> nn.Module:
    """A copy of ``module`` (on the meta device: an ensemble's template) holding ``params``."""
    twin = copy.deepcopy(module).to_empty(device="cpu")
    TensorDict.from_module(twin).data.update_(params.data)
    return twin


def frozen(module: nn.Module, x: Tensor) -> Tensor:
    """``module(x)`` with detached weights: gradients reach ``x`` only."""
    params = {k: v.detach() for k, v in module.named_parameters()}
    return functional_call(module, params, (x,))


# ----------------------------------------------------------------- the step
class Update:
    """One gradient step in six parts, run in order by ``__call__`` (:func:`split` times each).

    ``loss(batch)`` returns ``(total, td_error)``; ``priority(batch, td_error)`` feeds the buffer.
    ``parts`` keeps the objects behind the step for the tests.
    """

    def __init__(self, sample, loss, params, target, priority, parts) -> None:
        self.sample, self.loss, self.target, self.priority = sample, loss, target, priority
        self.optim = torch.optim.Adam(list(params), lr=LR, fused=True)
        self.parts = parts

    def __call__(self) -> None:
        batch = self.sample()
        total, td_error = self.loss(batch)
        self.optim.zero_grad()
        total.backward()
        self.optim.step()
        self.target()
        self.priority(batch, td_error)


def tdrl_buffer(algo: str, generator: torch.Generator | None = None):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=ALPHA,
        beta=BETA,
        storage=LazyTensorStorage(CAPACITY),
        batch_size=SIZES[algo].batch,
        generator=generator,
    )
    rb.extend(transitions(SIZES[algo]))
    rb.update_priority(torch.arange(CAPACITY), priorities())
    return rb


def tdrl_update(algo: str, compiled: bool = False, generator: torch.Generator | None = None):
    torch.manual_seed(0)
    loss = tdrl_loss(algo)
    rb = tdrl_buffer(algo, generator)
    updater = SoftUpdate(loss, tau=TAU)
    terms = TERMS[algo]
    if compiled:
        loss.compile()

    def forward(batch: TensorDict) -> tuple[Tensor, None]:
        out = loss(batch)
        return sum(out[k] for k in terms), None

    def priority(batch: TensorDict, _: None) -> None:
        rb.update_tensordict_priority(batch)

    return Update(rb.sample, forward, loss.parameters(), updater.step, priority, (loss, rb))


class Batch(NamedTuple):
    index: Tensor
    weight: Tensor
    obs: Tensor
    action: Tensor
    next_obs: Tensor
    reward: Tensor
    terminated: Tensor


class PlainBuffer:
    """The buffer by hand: one tensor per entry, a plain tree, ``index_select`` gathers."""

    def __init__(self, algo: str, tree: type = BlockTree, generator=None) -> None:
        data = transitions(SIZES[algo])
        self.columns = [
            data[k].clone()
            for k in ("observation", "action", ("next", "observation"), ("next", "reward"))
        ]
        self.columns.append(data["next", "terminated"].clone())
        self.tree = tree(CAPACITY, ALPHA, BETA)
        self.tree.add(torch.arange(CAPACITY))
        self.tree.update(torch.arange(CAPACITY), priorities())
        self.batch, self.generator = SIZES[algo].batch, generator

    def sample(self) -> Batch:
        index, weight = self.tree.sample(self.batch, self.generator)
        return Batch(index, weight, *(c.index_select(0, index) for c in self.columns))

    def update(self, batch: Batch, td_error: Tensor) -> None:
        self.tree.update(batch.index, td_error)


def weighted_mean(x: Tensor, w: Tensor) -> Tensor:
    """The importance-weighted mean of per-sample ``x`` (``[B, 1]``), as tdrl's losses."""
    return (x.reshape(w.shape) * w).sum() / w.sum()


def bootstrap(b: Batch, next_value: Tensor) -> Tensor:
    return b.reward + GAMMA * (~b.terminated).float() * next_value


def plain_dqn(loss: LossModule):
    net = copy.deepcopy(loss.value_network.module)
    target = copy.deepcopy(net).requires_grad_(False)

    def forward(b: Batch) -> tuple[Tensor, Tensor]:
        q = net(b.obs).gather(-1, b.action.unsqueeze(-1))
        with torch.no_grad():
            y = bootstrap(b, target(b.next_obs).max(-1, keepdim=True).values)
        error = (q - y).square()
        return weighted_mean(error, b.weight), error.detach().squeeze(-1)

    return forward, [net], [(net, target)]


def plain_critics(loss: LossModule) -> tuple[nn.ModuleList, nn.ModuleList]:
    ensemble = loss.qvalue_network
    template = ensemble._base[0].module
    params = ensemble.params["module"]
    critics = nn.ModuleList([plain_copy(template, params[i]) for i in range(2)])
    return critics, copy.deepcopy(critics).requires_grad_(False)


def plain_sac(loss: LossModule):
    actor = copy.deepcopy(loss.actor_network.module[0].module[0])
    critics, targets = plain_critics(loss)
    log_alpha = nn.Parameter(torch.zeros(()))
    act = SIZES["sac"].act

    def forward(b: Batch) -> tuple[Tensor, Tensor]:
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_lp = tanh_normal(actor(b.next_obs))
            nsa = torch.cat([b.next_obs, next_action], -1)
            next_q = torch.min(targets[0](nsa), targets[1](nsa))
            y = bootstrap(b, next_q - alpha * next_lp)
        sa = torch.cat([b.obs, b.action], -1)
        pred = [c(sa) for c in critics]
        q_loss = weighted_mean((pred[0] - y).square() + (pred[1] - y).square(), b.weight)
        new_action, lp = tanh_normal(actor(b.obs))
        sa_pi = torch.cat([b.obs, new_action], -1)
        q_pi = torch.min(frozen(critics[0], sa_pi), frozen(critics[1], sa_pi))
        actor_loss = weighted_mean(alpha * lp - q_pi, b.weight)
        alpha_loss = weighted_mean(-log_alpha * (lp.detach() - act), b.weight)
        with torch.no_grad():
            td_error = torch.maximum((pred[0] - y).abs(), (pred[1] - y).abs()).squeeze(-1)
        return actor_loss + q_loss + alpha_loss, td_error

    holder = nn.ParameterList([log_alpha])
    return forward, [actor, critics, holder], [(critics, targets)]


def plain_td3(loss: LossModule):
    actor = copy.deepcopy(loss.actor_network.module)
    target_actor = copy.deepcopy(actor).requires_grad_(False)
    critics, targets = plain_critics(loss)

    def forward(b: Batch) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            next_action = target_actor(b.next_obs)
            noise = (torch.randn_like(next_action) * 0.2).clamp(-0.5, 0.5)
            nsa = torch.cat([b.next_obs, (next_action + noise).clamp(-1.0, 1.0)], -1)
            y = bootstrap(b, torch.min(targets[0](nsa), targets[1](nsa)))
        sa = torch.cat([b.obs, b.action], -1)
        pred = [c(sa) for c in critics]
        q_loss = weighted_mean((pred[0] - y).square() + (pred[1] - y).square(), b.weight)
        actor_loss = -weighted_mean(
            frozen(critics[0], torch.cat([b.obs, actor(b.obs)], -1)), b.weight
        )
        with torch.no_grad():
            td_error = torch.maximum((pred[0] - y).abs(), (pred[1] - y).abs()).square()
        return actor_loss + q_loss, td_error.squeeze(-1)

    return forward, [actor, critics], [(actor, target_actor), (critics, targets)]


PLAIN = {"dqn": plain_dqn, "sac": plain_sac, "td3": plain_td3}


def plain_update(algo: str, tree: type = BlockTree, generator: torch.Generator | None = None):
    torch.manual_seed(0)
    forward, modules, pairs = PLAIN[algo](tdrl_loss(algo))  # the tdrl loss's weights
    buffer = PlainBuffer(algo, tree, generator)
    live = [p.detach() for live, _ in pairs for p in live.parameters()]
    target = [p for _, target in pairs for p in target.parameters()]

    def soft_update() -> None:
        torch._foreach_lerp_(target, live, TAU)

    params = [p for m in modules for p in m.parameters()]
    parts = (modules, pairs, buffer)
    return Update(buffer.sample, forward, params, soft_update, buffer.update, parts)


# ----------------------------------------------------------------- benchmarks
CASES = [
    (algo, kind)
    for algo in ("dqn", "sac", "td3")
    for kind in ("tdrl", "tdrl-compiled", "plain")
    if not (algo == "td3" and kind == "tdrl-compiled")  # compiling takes minutes on 2 cores
]


@pytest.mark.parametrize(("algo", "kind"), CASES)
def test_update(benchmark, algo, kind):
    benchmark.group = f"update {algo}"
    if kind == "plain":
        update = plain_update(algo)
    else:
        update = tdrl_update(algo, compiled=kind == "tdrl-compiled")
    for _ in range(3):  # compiles (not timed)
        update()
    benchmark(update)


# ----------------------------------------------------------------- the plain versions are right
TREES = [BinaryTree, BlockTree]


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("capacity", [1000, 20_000])
def test_plain_tree_samples_as_tdrl(tree, capacity):
    """Same stored weights, prefix sums, drawn elements and importance weights as tdrl's
    PrioritizedSampler, for the same uniform draws, before and after a priority update."""
    storage = LazyTensorStorage(capacity)
    storage.write_range(0, storage.prepare(torch.zeros(capacity)))
    sampler, plain = PrioritizedSampler(capacity, ALPHA, BETA), tree(capacity, ALPHA, BETA)
    everything = torch.arange(capacity)
    sampler.add(storage, everything)
    plain.add(everything)
    prio = priorities(capacity)
    prio[::7] = 0.0  # weight eps ** alpha: rarely drawn, the largest importance weights
    sampler.update_priority(everything, prio)
    plain.update(everything, prio)
    fixed = torch.tensor([0, 1, 7, capacity // 2, capacity - 1])
    for step in range(2):
        assert torch.equal(plain.weights(fixed), sampler.weights(fixed))
        assert torch.equal(plain.prefix_sums(), sampler.weights(everything).cumsum(0))
        assert plain.total() == pytest.approx(float(sampler.weights(everything).sum()), rel=1e-12)
        index, info = sampler.sample(storage, 4096, torch.Generator().manual_seed(step))
        plain_index, plain_weight = plain.sample(4096, torch.Generator().manual_seed(step))
        assert torch.equal(plain_index, index)
        assert torch.equal(plain_weight, info["priority_weight"])
        # a batch update with repeated indices: the last priority wins
        changed = torch.tensor([3, 5, 3, capacity - 1])
        new = torch.tensor([50.0, 0.0, 0.5, 2.0])
        sampler.update_priority(changed, new)
        plain.update(changed, new)


def test_plain_sample_distribution():
    """The plain tree draws each element with probability w_i / sum(w) (chi-square-like check)."""
    plain = BlockTree(600, ALPHA, BETA, block=64)
    prio = torch.linspace(0.0, 5.0, 600)
    plain.update(torch.arange(600), prio)
    index, weight = plain.sample(600_000, torch.Generator().manual_seed(0))
    expected = (prio.double() + 1e-8) ** ALPHA
    expected = expected / expected.sum() * 600_000
    counts = torch.bincount(index, minlength=600).double()
    assert ((counts - expected).abs() <= 5 * expected.sqrt() + 1).all()
    w = (prio.double() + 1e-8) ** ALPHA
    assert torch.allclose(weight.double(), (w[index] / w.min()) ** -BETA, rtol=1e-6)


def assert_params_close(plain: list[Tensor], tdrl: list[Tensor]) -> None:
    assert len(plain) == len(tdrl)
    for a, b in zip(plain, tdrl):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def stacked(modules: nn.ModuleList) -> list[Tensor]:
    """The critics' parameters stacked as tdrl's ensemble holds them."""
    return [torch.stack(ps) for ps in zip(*(list(m.parameters()) for m in modules))]


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3"])
def test_plain_step_computes_the_tdrl_step(algo):
    """Three steps each: the same drawn elements, losses, parameters, targets and priorities."""
    ours = tdrl_update(algo, generator=torch.Generator().manual_seed(3))
    plain = plain_update(algo, generator=torch.Generator().manual_seed(3))
    loss, rb = ours.parts
    modules, pairs, buffer = plain.parts
    for _ in range(3):
        torch.manual_seed(4)  # the same policy noise (SAC, TD3) on both sides
        batch = rb.sample()
        total, _ = ours.loss(batch)
        torch.manual_seed(4)
        b = buffer.sample()
        plain_total, td_error = plain.loss(b)
        assert torch.equal(b.index, batch["index"])
        torch.testing.assert_close(b.weight, batch["priority_weight"], rtol=1e-5, atol=0)
        torch.testing.assert_close(plain_total, total, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            td_error, batch["td_error"].reshape(td_error.shape), rtol=1e-5, atol=1e-6
        )
        for side, t in ((ours, total), (plain, plain_total)):
            side.optim.zero_grad()
            t.backward()
            side.optim.step()
            side.target()
        rb.update_tensordict_priority(batch)
        buffer.update(b, td_error)
        weights = rb.sampler.weights(torch.arange(CAPACITY))
        # a TD error near 0 differs in its last bits (float32 cancellation): atol
        torch.testing.assert_close(
            buffer.tree.weights(torch.arange(CAPACITY)), weights, rtol=1e-5, atol=1e-7
        )
    if algo == "dqn":
        assert_params_close(list(modules[0].parameters()), list(loss.value_network.parameters()))
        target = list(loss.value_network_target_params.values(True, True))
        assert_params_close(list(pairs[0][1].parameters()), target)
        return
    critics = loss.qvalue_network.params.values(True, True)
    assert_params_close(stacked(pairs[-1][0]), list(critics))
    target = loss.qvalue_network_target_params.values(True, True)
    assert_params_close(stacked(pairs[-1][1]), list(target))
    assert_params_close(list(modules[0].parameters()), list(loss.actor_network.parameters()))
    if algo == "sac":
        assert_params_close([modules[2][0]], [loss.log_alpha])
    else:
        target = loss.actor_network_target_params.values(True, True)
        assert_params_close(list(pairs[0][1].parameters()), list(target))


# ----------------------------------------------------------------- where the time goes
PARTS = ("sample", "loss", "backward", "optim", "target", "priority")


def split(update: Update, steps: int = 300) -> dict[str, float]:
    """Median microseconds of each part of ``update`` over ``steps`` steps (after a warm-up),
    in process CPU time (time other processes take on shared cores is not counted)."""
    ns = time.process_time_ns
    times: dict[str, list[int]] = {p: [] for p in PARTS}
    for step in range(steps + 20):
        t0 = ns()
        batch = update.sample()
        t1 = ns()
        total, td_error = update.loss(batch)
        t2 = ns()
        update.optim.zero_grad()
        total.backward()
        t3 = ns()
        update.optim.step()
        t4 = ns()
        update.target()
        t5 = ns()
        update.priority(batch, td_error)
        t6 = ns()
        if step >= 20:
            for part, a, b in zip(PARTS, (t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6)):
                times[part].append(b - a)
    return {p: statistics.median(v) / 1e3 for p, v in times.items()}


def tree_times(rounds: int = 300) -> None:
    """Median us of a sample and a priority update (batch 256, 100k elements) of the plain
    trees and of tdrl's sampler."""
    storage = LazyTensorStorage(CAPACITY)
    storage.write_range(0, storage.prepare(torch.zeros(CAPACITY)))
    sampler = PrioritizedSampler(CAPACITY, ALPHA, BETA)
    sampler.update_priority(torch.arange(CAPACITY), priorities())
    binary, block = BinaryTree(CAPACITY, ALPHA, BETA), BlockTree(CAPACITY, ALPHA, BETA)
    for tree in (binary, block):
        tree.update(torch.arange(CAPACITY), priorities())
    trees = {
        "tdrl PrioritizedSampler": (
            lambda: sampler.sample(storage, 256, None)[0],
            sampler.update_priority,
        ),
        "plain BinaryTree": (lambda: binary.sample(256)[0], binary.update),
        "plain BlockTree": (lambda: block.sample(256)[0], block.update),
    }
    for name, (sample, update) in trees.items():
        walls: dict[str, list[int]] = {"sample": [], "update": []}
        for _ in range(rounds):
            t0 = time.process_time_ns()
            index = sample()
            t1 = time.process_time_ns()
            update(index, torch.rand(256))
            walls["sample"].append(t1 - t0)
            walls["update"].append(time.process_time_ns() - t1)
        sample_us, update_us = (statistics.median(w) / 1e3 for w in walls.values())
        print(f"{name:<24} sample {sample_us:6.0f} us, update {update_us:6.0f} us")


def main() -> None:
    tree_times()
    rows: list[tuple[str, dict[str, float]]] = []
    for algo in ("dqn", "sac", "td3"):
        rows.append((f"{algo} tdrl", split(tdrl_update(algo))))
        rows.append((f"{algo} plain", split(plain_update(algo))))
        if "--compiled" in sys.argv and algo != "td3":
            rows.append((f"{algo} tdrl-compiled", split(tdrl_update(algo, compiled=True))))
    print(f"{'us (median)':<20}" + "".join(f"{p:>10}" for p in PARTS) + f"{'sum':>10}")
    for name, parts in rows:
        cells = "".join(f"{parts[p]:>10.0f}" for p in PARTS)
        print(f"{name:<20}{cells}{sum(parts.values()):>10.0f}")


if __name__ == "__main__":
    main()
