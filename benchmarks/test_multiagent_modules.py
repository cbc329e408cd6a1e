"""Multi-agent module benchmarks: MultiAgentMLP, QMixer and a QMixerLoss update beside plain code.

Each group holds the tdrl version and hand-written plain PyTorch versions of the same work, so
the ratios are visible in one run::

    .venv/bin/python -m pytest benchmarks/test_multiagent_modules.py --benchmark-enable \\
        -p no:cacheprovider

Groups (8 agents, a batch of 1024 joint samples):

- ``mamlp_{agents|shared}_{local|central}_{forward|train}``: a MultiAgentMLP (18 inputs per
  agent, 5 outputs, two hidden layers of 128, Tanh) with per-agent (``agents``) or shared
  parameters, decentralised (``local``) or centralised (``central``: every agent reads all
  agents' inputs); ``forward`` under ``no_grad`` (acting) and ``train`` (forward, backward).
  Beside it: ``loop``, a Python loop of one ``nn.Sequential`` per agent (per-agent weights) or
  of the shared one applied to each agent's slice; ``batched``, a hand-written version on
  stacked weights (``torch.baddbmm``) or, for shared weights, one ``nn.Sequential`` call on
  all rows.
- ``qmixer_train``: QMixer forward and backward (state of 48, embed 32) beside a plain
  hand-written hypernetwork mixer.
- ``qmix_update``: one QMIX update (loss forward, backward, Adam step) with QMixerLoss on a
  shared ``MultiAgentMLP`` QValueActor (``tdrl``) or a plain TensorDictModule network
  (``tdrl_plain_net``) and a QMixer, beside a hand-written QMIX update with the same sizes.

Rounds are timed in process CPU time (``time.process_time``), which other processes on
shared cores do not inflate. The layer outputs here are 4 MB; glibc may serve such blocks with
fresh ``mmap`` pages on every call or from its heap, depending on the process's allocation
history (measured: 14 or 2,000 minor page faults per forward for the same code), which moves
a group by up to 1.8x between identical runs. For stable ratios keep large blocks in the
heap::

    MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824 \
        .venv/bin/python -m pytest benchmarks/test_multiagent_modules.py --benchmark-enable \
        -p no:cacheprovider
"""

from __future__ import annotations

import copy
import time

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torch.nn import functional as F

from tdrl.modules import MultiAgentMLP, QMixer, QValueActor
from tdrl.objectives import QMixerLoss

torch.set_num_threads(1)

pytestmark = pytest.mark.benchmark(
    timer=time.process_time, max_time=1.0, min_rounds=5, warmup=True, warmup_iterations=2
)

AGENTS, BATCH, N_IN, N_OUT, HIDDEN = 8, 1024, 18, 5, 128
STATE, EMBED, GAMMA = 48, 32, 0.99
MODES = ["forward", "train"]


# ----------------------------------------------------------------- MultiAgentMLP
def _mlp(centralized: bool, share: bool) -> MultiAgentMLP:
    torch.manual_seed(0)
    return MultiAgentMLP(
        N_IN, N_OUT, AGENTS, centralized=centralized, share_params=share, num_cells=[HIDDEN] * 2
    )


def _sequential(weights: list[tuple[torch.Tensor, torch.Tensor]]) -> nn.Sequential:
    """An nn.Sequential of Linear/Tanh layers holding copies of ``weights``."""
    layers: list[nn.Module] = []
    for i, (w, b) in enumerate(weights):
        linear = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            linear.weight.copy_(w)
            linear.bias.copy_(b)
        layers.append(linear)
        if i < len(weights) - 1:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def _layer_weights(mlp: MultiAgentMLP) -> list[tuple[torch.Tensor, torch.Tensor]]:
    state = mlp.state_dict()
    names = sorted({k.rsplit(".", 1)[0] for k in state}, key=lambda n: int(n.split(".")[-1]))
    return [(state[f"{n}.weight"], state[f"{n}.bias"]) for n in names]


class LoopMLP(nn.Module):
    """Plain loop: agent i's network (or the shared one) on agent i's input (all inputs when
    centralised); outputs stacked on the agent dim."""

    def __init__(self, mlp: MultiAgentMLP) -> None:
        super().__init__()
        weights = _layer_weights(mlp)
        self.centralized, self.shared = mlp.centralized, mlp.share_params
        n_nets = 1 if self.shared else AGENTS
        self.nets = nn.ModuleList(
            _sequential(weights if self.shared else [(w[i], b[i]) for w, b in weights])
            for i in range(n_nets)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten(-2) if self.centralized else None
        outs = []
        for i in range(AGENTS):
            net = self.nets[0 if self.shared else i]
            outs.append(net(flat if flat is not None else x[..., i, :]))
        return torch.stack(outs, -2)


class BatchedMLP(nn.Module):
    """Hand-written batched version: stacked weights and ``baddbmm`` (per-agent), or one
    ``nn.Sequential`` call on every row (shared)."""

    def __init__(self, mlp: MultiAgentMLP) -> None:
        super().__init__()
        weights = _layer_weights(mlp)
        self.centralized, self.shared = mlp.centralized, mlp.share_params
        if self.shared:
            self.net = _sequential(weights)
            return
        self.weights = nn.ParameterList(nn.Parameter(w.transpose(1, 2).clone()) for w, _ in weights)
        self.biases = nn.ParameterList(nn.Parameter(b.unsqueeze(1).clone()) for _, b in weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.shared:
            y = self.net(x.flatten(-2) if self.centralized else x)
            return y.unsqueeze(-2).expand(*x.shape[:-1], y.shape[-1]) if self.centralized else y
        if self.centralized:
            h = x.flatten(-2).unsqueeze(0).expand(AGENTS, *x.shape[:-2], -1)  # [A, B, A*in]
        else:
            h = x.transpose(0, 1)  # [A, B, in]
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = torch.tanh(h)
        return h.transpose(0, 1)


def _input() -> torch.Tensor:
    return torch.randn(BATCH, AGENTS, N_IN, generator=torch.Generator().manual_seed(0))


def _run_mlp(benchmark, net: nn.Module, mode: str, group: str) -> None:
    benchmark.group = f"{group}_{mode}"
    x = _input()
    if mode == "forward":
        with torch.no_grad():
            benchmark(net, x)
        return
    params = list(net.parameters())

    def step() -> None:
        for p in params:
            p.grad = None
        net(x).sum().backward()

    benchmark(step)


VARIANTS = [
    pytest.param(False, False, id="agents_local"),
    pytest.param(True, False, id="agents_central"),
    pytest.param(False, True, id="shared_local"),
    pytest.param(True, True, id="shared_central"),
]


def _group(centralized: bool, share: bool) -> str:
    return f"mamlp_{'shared' if share else 'agents'}_{'central' if centralized else 'local'}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("centralized", "share"), VARIANTS)
def test_mamlp_tdrl(benchmark, centralized, share, mode):
    _run_mlp(benchmark, _mlp(centralized, share), mode, _group(centralized, share))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("centralized", "share"), VARIANTS)
def test_mamlp_loop(benchmark, centralized, share, mode):
    net = LoopMLP(_mlp(centralized, share))
    _run_mlp(benchmark, net, mode, _group(centralized, share))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("centralized", "share"), VARIANTS)
def test_mamlp_batched(benchmark, centralized, share, mode):
    net = BatchedMLP(_mlp(centralized, share))
    _run_mlp(benchmark, net, mode, _group(centralized, share))


def test_mamlp_baselines_agree():
    """The plain versions compute what MultiAgentMLP computes (checked once, untimed)."""
    for centralized, share in [(False, False), (True, False), (False, True), (True, True)]:
        mlp = _mlp(centralized, share)
        x = _input()[:16]
        with torch.no_grad():
            torch.testing.assert_close(LoopMLP(mlp)(x), mlp(x))
            torch.testing.assert_close(BatchedMLP(mlp)(x), mlp(x))


# ----------------------------------------------------------------- QMixer
class PlainMixer(nn.Module):
    """Hand-written QMIX mixing network: hypernetworks on the state, abs() weights."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(STATE, EMBED * AGENTS)
        self.b1 = nn.Linear(STATE, EMBED)
        self.w2 = nn.Linear(STATE, EMBED)
        self.v = nn.Sequential(nn.Linear(STATE, EMBED), nn.ReLU(), nn.Linear(EMBED, 1))

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        w1 = self.w1(state).abs().view(-1, AGENTS, EMBED)
        hidden = F.elu(torch.bmm(q.view(-1, 1, AGENTS), w1) + self.b1(state).unsqueeze(1))
        w2 = self.w2(state).abs().unsqueeze(-1)
        return (torch.bmm(hidden, w2).squeeze(-1) + self.v(state)).view(*q.shape[:-2], 1)


def _mixer_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(BATCH, AGENTS, 1, generator=g, requires_grad=True)
    return q, torch.randn(BATCH, STATE, generator=g)


def _run_mixer(benchmark, mixer: nn.Module) -> None:
    benchmark.group = "qmixer_train"
    q, state = _mixer_inputs()
    params = [*mixer.parameters(), q]

    def step() -> None:
        for p in params:
            p.grad = None
        mixer(q, state).sum().backward()

    benchmark(step)


def test_qmixer_tdrl(benchmark):
    torch.manual_seed(0)
    _run_mixer(benchmark, QMixer((STATE,), EMBED, AGENTS))


def test_qmixer_plain(benchmark):
    torch.manual_seed(0)
    _run_mixer(benchmark, PlainMixer())


# ----------------------------------------------------------------- QMixerLoss update
N_ACTIONS = 5


def _qmix_batch() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    terminated = torch.rand(BATCH, 1, generator=g) < 0.05

    def obs() -> torch.Tensor:
        return torch.randn(BATCH, AGENTS, N_IN, generator=g)

    return TensorDict(
        {
            "agents": {
                "observation": obs(),
                "action": torch.randint(N_ACTIONS, (BATCH, AGENTS), generator=g),
            },
            "state": torch.randn(BATCH, STATE, generator=g),
            "next": {
                "agents": {"observation": obs()},
                "state": torch.randn(BATCH, STATE, generator=g),
                "reward": torch.randn(BATCH, 1, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        [BATCH],
    )


def _mixer_module() -> TensorDictModule:
    return TensorDictModule(
        QMixer((STATE,), EMBED, AGENTS),
        [("agents", "chosen_action_value"), "state"],
        ["chosen_action_value"],
    )


def _run_qmix_loss(benchmark, loss: QMixerLoss) -> None:
    benchmark.group = "qmix_update"
    loss.make_value_estimator(gamma=GAMMA)
    batch = _qmix_batch()
    optim = torch.optim.Adam(loss.parameters(), lr=1e-4)

    def step() -> None:
        out = loss(batch)
        optim.zero_grad()
        out["loss"].backward()
        optim.step()

    benchmark(step)


def _shared_net() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(N_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, N_ACTIONS),
    )  # fmt: skip


def test_qmix_update_tdrl(benchmark):
    torch.manual_seed(0)
    net = MultiAgentMLP(
        N_IN, N_ACTIONS, AGENTS, centralized=False, share_params=True, num_cells=[HIDDEN] * 2
    )
    actor = QValueActor(
        net,
        in_keys=[("agents", "observation")],
        action_space="categorical",
        action_value_key=("agents", "action_value"),
        action_key=("agents", "action"),
        chosen_action_value_key=("agents", "chosen_action_value"),
    )
    _run_qmix_loss(benchmark, QMixerLoss(actor, _mixer_module()))


def test_qmix_update_tdrl_plain_net(benchmark):
    torch.manual_seed(0)
    net = TensorDictModule(_shared_net(), [("agents", "observation")], [("agents", "action_value")])
    _run_qmix_loss(benchmark, QMixerLoss(net, _mixer_module(), action_space="categorical"))


def test_qmix_update_plain(benchmark):
    benchmark.group = "qmix_update"
    torch.manual_seed(0)
    net, mixer = _shared_net(), PlainMixer()
    target_net, target_mixer = copy.deepcopy(net), copy.deepcopy(mixer)
    for module in (target_net, target_mixer):
        module.requires_grad_(False)
    optim = torch.optim.Adam([*net.parameters(), *mixer.parameters()], lr=1e-4)
    b = _qmix_batch()
    obs, action, state = b["agents", "observation"], b["agents", "action"], b["state"]
    nxt = b["next"]

    def step() -> None:
        chosen = net(obs).gather(-1, action.unsqueeze(-1))
        pred = mixer(chosen, state)
        with torch.no_grad():
            next_q = target_net(nxt["agents", "observation"]).max(-1, keepdim=True).values
            next_v = target_mixer(next_q, nxt["state"])
            y = nxt["reward"] + GAMMA * (~nxt["terminated"]).float() * next_v
        loss = (pred - y).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()

    benchmark(step)
