"""Every scenario module; importing this package registers them all."""

from . import actors, collectors, envs, libs, losses, samplers, specs, storages, transforms, values

__all__ = [
    "actors",
    "collectors",
    "envs",
    "libs",
    "losses",
    "samplers",
    "specs",
    "storages",
    "transforms",
    "values",
]
