"""Every scenario module; importing this package registers them all."""

from . import actors, collectors, losses, samplers, storages

__all__ = ["actors", "collectors", "losses", "samplers", "storages"]
