"""``group_optimizers``: one optimiser stepping the parameter groups of several."""

from __future__ import annotations

import torch

__all__ = ["group_optimizers"]


def group_optimizers(*optimizers: torch.optim.Optimizer | None) -> torch.optim.Optimizer:
    """Merges the parameter groups of optimisers of one type into a new optimiser of it.

    Each group keeps its own options (learning rate, ...), as with TorchRL's function;
    ``None`` entries are skipped. The optimisers' states are not carried over.

    Raises:
        ValueError: no optimiser, or optimisers of different types.

    Examples:
        >>> import torch
        >>> a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        >>> opt = group_optimizers(torch.optim.Adam(a.parameters(), lr=1e-3),
        ...                        torch.optim.Adam(b.parameters(), lr=1e-4))
        >>> [g["lr"] for g in opt.param_groups]
        [0.001, 0.0001]
    """
    given = [opt for opt in optimizers if opt is not None]
    if not given:
        raise ValueError("group_optimizers: no optimizer given (got only None or nothing).")
    kinds = {type(opt) for opt in given}
    if len(kinds) > 1:
        raise ValueError(
            "group_optimizers: the optimizers are of different types (got "
            f"{sorted(k.__name__ for k in kinds)}; expected one type). Build them alike."
        )
    groups = [dict(group) for opt in given for group in opt.param_groups]
    return type(given[0])(groups)  # type: ignore[call-arg]
