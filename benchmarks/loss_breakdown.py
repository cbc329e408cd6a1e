"""Where the time of an off-policy update goes: forward, backward and optimizer, tdrl and plain.

Not a benchmark test (pytest does not collect it): a script that builds each update of
``test_losses_offpolicy.py`` (the tdrl loss and its plain-PyTorch twin, same networks and
batch), then times the parts of one update alternately, tdrl and plain, round after round:

- ``forward``: the loss call (tdrl) or the hand-written loss (plain), summed to one scalar;
- ``backward``: ``total.backward()``;
- ``optim``: ``zero_grad`` and Adam's ``step``.

It prints the median of every part in microseconds (CPU time of the process, one intra-op
thread) and the ratio plain / tdrl of whole updates. The forward's difference is tdrl's
overhead (key reads, TensorDict outputs, checks); ``--profile NAME`` adds a cProfile of that
tdrl forward, sorted by own time. Run it with::

    .venv/bin/python benchmarks/loss_breakdown.py [--size small|mujoco] [--rounds 200]

Against another tree: ``PYTHONPATH=<tree> .venv/bin/python benchmarks/loss_breakdown.py``
(only the public loss API is used, so one script measures both).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import operator
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import test_losses_offpolicy as bench  # a sibling module, importable once the path is set

PARTS = ("forward", "backward", "optim")


def _tdrl_parts(loss, batch):
    optim = torch.optim.Adam(loss.parameters(), lr=1e-4)
    terms = [k for k in loss(batch).keys() if k == "loss" or k.startswith("loss_")]

    def forward():
        out = loss(batch)
        return functools.reduce(operator.add, [out[k] for k in terms])

    return forward, optim


def _plain_parts(name, loss, batch):
    modules, losses, _ = bench.plain_update(name, loss, batch)
    optim = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=1e-4)
    return losses, optim


def _time_update(forward, optim, into):
    clock = time.process_time_ns
    t0 = clock()
    total = forward()
    t1 = clock()
    optim.zero_grad()
    total.backward()
    t2 = clock()
    optim.step()
    t3 = clock()
    for part, ns in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2), strict=True):
        into.setdefault(part, []).append(ns / 1e3)


def measure(name: str, size: str, rounds: int) -> dict[str, dict[str, float]]:
    """Median µs of each part, ``{"tdrl": {...}, "plain": {...}}``, alternating rounds."""
    sz = bench.SIZES[size]
    batch = bench.make_batch(sz, discrete=name in ("dqn", "discrete_sac"))
    sides = {
        "tdrl": _tdrl_parts(bench.tdrl_loss(name, sz), batch),
        "plain": _plain_parts(name, bench.tdrl_loss(name, sz), batch),
    }
    samples: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for i in range(rounds + 5):
        for side, (forward, optim) in sides.items():
            _time_update(forward, optim, samples[side] if i >= 5 else {})
    return {
        side: {part: statistics.median(values) for part, values in parts.items()}
        for side, parts in samples.items()
    }


def profile(name: str, size: str, rounds: int) -> None:
    sz = bench.SIZES[size]
    batch = bench.make_batch(sz, discrete=name in ("dqn", "discrete_sac"))
    forward, _ = _tdrl_parts(bench.tdrl_loss(name, sz), batch)
    for _ in range(5):
        forward()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(rounds):
        forward()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=list(bench.SIZES), default="small")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--only", nargs="*", default=bench.NAMES)
    parser.add_argument("--profile", default=None, help="cProfile this loss's tdrl forward")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.profile:
        profile(args.profile, args.size, args.rounds)
        return
    print(f"size {args.size}: median µs per part (CPU time), {args.rounds} alternating rounds")
    head = "".join(f"{p:>10s}" for p in PARTS)
    print(f"{'loss':14s}{'side':>6s}{head}{'total':>10s}   plain/tdrl")
    for name in args.only:
        result = measure(name, args.size, args.rounds)
        totals = {side: sum(parts.values()) for side, parts in result.items()}
        for side, parts in result.items():
            cells = "".join(f"{parts[p]:10.1f}" for p in PARTS)
            ratio = f"   {totals['plain'] / totals['tdrl']:.2f}" if side == "tdrl" else ""
            print(f"{name:14s}{side:>6s}{cells}{totals[side]:10.1f}{ratio}")


if __name__ == "__main__":
    main()
