"""The scenario registry: ``@scenario("area/name")`` records a function ``f(lib) -> result``."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import torch

Scenario = Callable[[Any], Any]
SCENARIOS: dict[str, Scenario] = {}
# scenarios that start worker processes (seconds each on 2 cores): run by ``run.py --slow`` only,
# not by tests/compat/test_differential.py (which must stay under a minute)
SLOW: set[str] = set()

# scenario area (the id's prefix) -> the tdrl package whose behaviour it checks (for reports)
AREAS = {
    "collectors": "tdrl.collectors",
    "storages": "tdrl.data (storages)",
    "samplers": "tdrl.data (samplers)",
    "actors": "tdrl.modules",
    "losses": "tdrl.objectives",
    "values": "tdrl.objectives.value",
    "envs": "tdrl.envs.core",
    "transforms": "tdrl.envs.transforms",
    "gym": "tdrl.envs.libs",
    "batched": "tdrl.envs.batched",
    "specs": "tdrl.specs",
}


def scenario(sid: str, slow: bool = False) -> Callable[[Scenario], Scenario]:
    """Register ``f`` under the id ``sid`` (``"<area>/<name>"``, area one of ``AREAS``).

    ``slow``: the scenario starts processes; only ``run.py --slow`` runs it.
    """
    area = sid.split("/", 1)[0]
    if area not in AREAS or "/" not in sid:
        raise ValueError(
            f"scenario: bad id (got {sid!r}; expected '<area>/<name>', area in {list(AREAS)})."
        )

    def register(f: Scenario) -> Scenario:
        if sid in SCENARIOS:
            raise ValueError(f"scenario: id {sid!r} registered twice.")
        SCENARIOS[sid] = f
        if slow:
            SLOW.add(sid)
        return f

    return register


def capture(f: Callable[[], Any]) -> Any:
    """``f()``, or the exception it raised (so one step of a scenario may fail alone)."""
    try:
        return f()
    except Exception as err:  # the exception is the observed behaviour
        return err


def run_one(sid: str, lib: Any) -> Any:
    """Run scenario ``sid`` seeded, returning its result or the exception it raised."""
    torch.manual_seed(0)
    random.seed(0)
    try:
        import numpy as np

        np.random.seed(0)
    except ImportError:  # pragma: no cover - numpy ships with torch here
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return SCENARIOS[sid](lib)
        except Exception as err:
            return err
