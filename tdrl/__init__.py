"""tdrl: a fast, robust reinforcement-learning library for PyTorch built on tensordict.

The package root stays import-light on purpose: import what you need from the
subpackages (``tdrl.specs``, ``tdrl.envs``, ``tdrl.data``, ``tdrl.modules``,
``tdrl.objectives``, ``tdrl.collectors``, ``tdrl.train``).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
