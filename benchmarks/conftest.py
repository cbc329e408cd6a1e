"""Shared benchmark fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_intra_op_thread() -> None:
    """Pins one intra-op thread: on shared cores, threads fight each other (DESIGN.md section 3)."""
    torch.set_num_threads(1)
