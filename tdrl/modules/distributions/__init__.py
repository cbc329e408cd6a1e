"""Action distributions for policies: continuous, deterministic, one-hot and masked.

Every class subclasses :class:`torch.distributions.Distribution`, takes its parameters as
keyword arguments (``loc``/``scale``, ``param``, ``logits``/``probs``, ``mask``...) so that
``tensordict.nn.ProbabilisticTensorDictModule`` can build it from its input keys, and has a
``deterministic_sample`` property used for ``InteractionType.DETERMINISTIC``. Vector actions
use the last dimension as the event dimension: ``log_prob`` sums over it. Argument
validation is off by default (``validate_args=False``) for speed.
"""

from tdrl.modules.distributions._delta import Delta, TanhDelta
from tdrl.modules.distributions._discrete import OneHotCategorical
from tdrl.modules.distributions._masked import MaskedCategorical, MaskedOneHotCategorical
from tdrl.modules.distributions._normal import IndependentNormal
from tdrl.modules.distributions._reparam import ReparamGradientStrategy
from tdrl.modules.distributions._tanh_normal import TanhNormal
from tdrl.modules.distributions._truncated_normal import TruncatedNormal

__all__ = [
    "Delta",
    "IndependentNormal",
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "OneHotCategorical",
    "ReparamGradientStrategy",
    "TanhDelta",
    "TanhNormal",
    "TruncatedNormal",
]
