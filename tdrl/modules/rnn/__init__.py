"""Recurrent modules whose hidden states travel in the data (step and sequence modes).

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from tdrl.modules.rnn import GRUModule
    >>> gru = GRUModule(2, 4, in_key="obs", out_key="features")
    >>> td = TensorDict(obs=torch.zeros(3, 2), recurrent_state=torch.zeros(3, 1, 4), batch_size=[3])
    >>> gru(td)["features"].shape
    torch.Size([3, 4])
"""

from tdrl.modules.rnn._base import RecurrentModuleBase
from tdrl.modules.rnn._global import recurrent_mode
from tdrl.modules.rnn._gru import GRUModule
from tdrl.modules.rnn._lstm import LSTMModule
from tdrl.modules.rnn._mode import set_recurrent_mode

__all__ = [
    "GRUModule",
    "LSTMModule",
    "RecurrentModuleBase",
    "recurrent_mode",
    "set_recurrent_mode",
]
