"""Prioritized-replay sum trees in plain PyTorch: the baselines of ``test_update_step.py``.

What an engineer writes by hand for prioritized replay (Schaul et al., 2016) without a library,
every operation vectorised over the batch (no Python loop over the elements):

- :class:`BinaryTree`: the textbook binary sum tree and min tree in heap layout (node ``k``
  has children ``2k`` and ``2k + 1``, leaves at ``size + i``), a few tensor ops per level:
  ``log2(capacity)`` levels (17 for 100k elements) per sample and per update;
- :class:`BlockTree`: the same sums in two levels, leaves in blocks of ``block`` elements
  under one flat top level of block sums (and block minima): a sample is a ``cumsum`` +
  ``searchsorted`` over the top, then over the chosen blocks' rows; an update rewrites the
  leaves and the sums of the blocks it touched. A dozen ops in all: the one the benchmark
  uses, with blocks of 128 (measured faster than 256 or 512 at 100k elements;
  ``python benchmarks/test_update_step.py`` times both trees).

Both have the semantics of ``tdrl.data.PrioritizedSampler``: stored weights
``(priority + eps) ** alpha`` in float64, the leaf ``i`` with ``c[i-1] <= u * total < c[i]``
for a uniform draw ``u`` (``c`` the prefix sums), float32 importance weights
``(w_i / w_min) ** -beta``, new elements at the largest priority seen. The benchmark's tests
check them against tdrl's sampler. Not a tdrl module: nothing in ``tdrl/`` imports it.
"""

from __future__ import annotations

import torch

_BELOW_ONE = 1.0 - 2.0**-52  # keeps the mass strictly below the total (float rounding)


class _Tree:
    """Shared parts: weights, sampling from ``find``, importance weights."""

    capacity: int
    leaves: torch.Tensor

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float) -> None:
        self.capacity, self.alpha, self.beta, self.eps = capacity, alpha, beta, eps
        self.max_priority = 1.0

    def total(self) -> float:
        raise NotImplementedError

    def min_weight(self) -> float:
        raise NotImplementedError

    def find(self, fraction: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _set(self, index: torch.Tensor, weight: torch.Tensor) -> None:
        raise NotImplementedError

    def weights(self, index: torch.Tensor) -> torch.Tensor:
        """The stored leaf weights ``(p + eps) ** alpha`` at ``index``."""
        return self.leaves.index_select(0, index)

    def prefix_sums(self) -> torch.Tensor:
        """``cumsum`` of the leaves (for the tests)."""
        return self.leaves[: self.capacity].cumsum(0)

    def add(self, index: torch.Tensor) -> None:
        """New elements get the largest priority seen."""
        self.update(index, torch.full(index.shape, self.max_priority, dtype=torch.float64))

    def update(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Sets the priorities at ``index`` (a repeated index: the last one wins on the CPU)."""
        priority = priority.detach().reshape(-1).to(torch.float64)
        self.max_priority = max(self.max_priority, float(priority.max()))
        self._set(index.reshape(-1), (priority + self.eps).pow_(self.alpha))

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(index, importance weight)`` of ``batch_size`` draws proportional to the weights."""
        fraction = torch.rand(batch_size, dtype=torch.float64, generator=generator)
        index = self.find(fraction)
        ratio = self.weights(index).div_(self.min_weight())
        return index, ratio.pow_(-self.beta).to(torch.float32)


class BinaryTree(_Tree):
    """The binary heap-layout sum and min trees."""

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float = 1e-8) -> None:
        super().__init__(capacity, alpha, beta, eps)
        self.size = 1 << max(capacity - 1, 1).bit_length()  # leaves, a power of two
        self.depth = self.size.bit_length() - 1
        self.sum = torch.zeros(2 * self.size, dtype=torch.float64)
        self.min = torch.full((2 * self.size,), torch.inf, dtype=torch.float64)
        self.leaves = self.sum[self.size :]

    def total(self) -> float:
        return float(self.sum[1])

    def min_weight(self) -> float:
        return float(self.min[1])

    def _set(self, index: torch.Tensor, weight: torch.Tensor) -> None:
        node = index + self.size
        self.sum.index_copy_(0, node, weight)
        self.min.index_copy_(0, node, weight)
        pairs_sum, pairs_min = self.sum.view(-1, 2), self.min.view(-1, 2)
        for _ in range(self.depth):
            node = node >> 1  # repeated parents get the same value: no unique() needed
            self.sum.index_copy_(0, node, pairs_sum.index_select(0, node).sum(1))
            self.min.index_copy_(0, node, pairs_min.index_select(0, node).amin(1))

    def find(self, fraction: torch.Tensor) -> torch.Tensor:
        mass = fraction * (self.total() * _BELOW_ONE)
        node = torch.ones(mass.shape, dtype=torch.long)
        pairs = self.sum.view(-1, 2)
        for _ in range(self.depth):
            left = pairs.index_select(0, node).select(1, 0)
            right = mass >= left
            mass = mass - left * right
            node = 2 * node + right
        return node - self.size


class BlockTree(_Tree):
    """Two levels: leaves in blocks of ``block``, one flat top level of block sums/minima."""

    def __init__(
        self, capacity: int, alpha: float, beta: float, eps: float = 1e-8, block: int = 128
    ) -> None:
        super().__init__(capacity, alpha, beta, eps)
        self.block = block
        blocks = -(-capacity // block)
        self.leaves = torch.zeros(blocks * block, dtype=torch.float64)
        self.rows = self.leaves.view(blocks, block)
        self.min_rows = torch.full((blocks, block), torch.inf, dtype=torch.float64)
        self.block_sum = torch.zeros(blocks, dtype=torch.float64)
        self.block_min = torch.full((blocks,), torch.inf, dtype=torch.float64)

    def total(self) -> float:
        return float(self.block_sum.sum())

    def min_weight(self) -> float:
        return float(self.block_min.amin())

    def _set(self, index: torch.Tensor, weight: torch.Tensor) -> None:
        self.leaves.index_copy_(0, index, weight)
        self.min_rows.view(-1).index_copy_(0, index, weight)
        blocks = index // self.block  # repeated blocks get the same value: no unique() needed
        self.block_sum.index_copy_(0, blocks, self.rows.index_select(0, blocks).sum(1))
        self.block_min.index_copy_(0, blocks, self.min_rows.index_select(0, blocks).amin(1))

    def find(self, fraction: torch.Tensor) -> torch.Tensor:
        top = self.block_sum.cumsum(0)
        mass = fraction * (float(top[-1]) * _BELOW_ONE)
        block = torch.searchsorted(top, mass, right=True)
        mass = mass - (top - self.block_sum).index_select(0, block)
        rows = self.rows.index_select(0, block).cumsum(1)
        child = torch.searchsorted(rows, mass.unsqueeze(1), right=True).squeeze(1)
        return (block * self.block + child.clamp_(max=self.block - 1)).clamp_(max=self.capacity - 1)
