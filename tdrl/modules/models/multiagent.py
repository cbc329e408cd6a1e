"""TorchRL's ``torchrl.modules.models.multiagent`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules.models`), so code
written ``from torchrl.modules.models.multiagent import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.models.multiagent import MultiAgentMLP
    >>> import tdrl.modules.models
    >>> MultiAgentMLP is tdrl.modules.models.MultiAgentMLP
    True
"""

from tdrl.modules.models import (
    MultiAgentConvNet,
    MultiAgentMLP,
    QMixer,
    VDNMixer,
)

__all__ = [
    "MultiAgentConvNet",
    "MultiAgentMLP",
    "QMixer",
    "VDNMixer",
]
