"""Options of the soak benchmark (``benchmarks/soak/test_soak_long.py``)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak")
    group.addoption("--soak-minutes", type=float, default=10.0, help="soak run time (default 10)")
    group.addoption("--soak-out", default=None, help="folder for the run and its samples")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak's own time limit: the stated time, the start-up and the final stop."""
    limit = float(config.getoption("--soak-minutes")) * 60 + 600
    for item in items:
        if item.name == "test_soak":
            item.add_marker(pytest.mark.timeout(limit))
