"""TorchRL's ``torchrl.modules.tensordict_module.rnn`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules`), so code
written ``from torchrl.modules.tensordict_module.rnn import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.tensordict_module.rnn import LSTMModule
    >>> import tdrl.modules
    >>> LSTMModule is tdrl.modules.LSTMModule
    True
"""

from tdrl.modules import (
    GRUModule,
    LSTMModule,
    RecurrentModuleBase,
    recurrent_mode,
    set_recurrent_mode,
)

__all__ = [
    "GRUModule",
    "LSTMModule",
    "RecurrentModuleBase",
    "recurrent_mode",
    "set_recurrent_mode",
]
