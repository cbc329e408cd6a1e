"""TorchRL's ``torchrl.objectives.multiagent`` import path for the multi-agent losses.

The class is tdrl's own (the same object as in :mod:`tdrl.objectives`), so
``from tdrl.objectives.multiagent import QMixerLoss`` works as TorchRL code expects.

Examples:
    >>> from tdrl.objectives.multiagent import QMixerLoss
    >>> import tdrl.objectives
    >>> QMixerLoss is tdrl.objectives.QMixerLoss
    True
"""

from tdrl.objectives._qmixer import QMixerLoss

__all__ = ["QMixerLoss"]
