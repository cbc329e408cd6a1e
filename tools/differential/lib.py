"""The ``lib`` namespace a scenario receives: one library's modules under common names."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

# attribute -> module, per library. torchrl keeps specs and replay buffers in torchrl.data, tdrl's
# data package re-exports its specs, so ``lib.data.Composite`` works on both.
MODULES = {
    "torchrl": {
        "envs": "torchrl.envs",
        "envs_utils": "torchrl.envs.utils",
        "gym": "torchrl.envs.libs.gym",
        "data": "torchrl.data",
        "modules": "torchrl.modules",
        "objectives": "torchrl.objectives",
        "value": "torchrl.objectives.value",
        "functional": "torchrl.objectives.value.functional",
        "collectors": "torchrl.collectors",
    },
    "tdrl": {
        "envs": "tdrl.envs",
        "envs_utils": "tdrl.envs.utils",
        "gym": "tdrl.envs.libs.gym",
        "data": "tdrl.data",
        "modules": "tdrl.modules",
        "objectives": "tdrl.objectives",
        "value": "tdrl.objectives.value",
        "functional": "tdrl.objectives.value.functional",
        "collectors": "tdrl.collectors",
    },
}


def load(name: str) -> SimpleNamespace:
    """The namespace of library ``name`` (``"torchrl"`` or ``"tdrl"``)."""
    if name not in MODULES:
        raise ValueError(
            f"lib.load: unknown library (got {name!r}; expected one of {list(MODULES)})."
        )
    if name == "torchrl":
        from differential.torchrl_shims import install

        install()
    ns = SimpleNamespace(name=name)
    for attr, module in MODULES[name].items():
        setattr(ns, attr, importlib.import_module(module))
    return ns
