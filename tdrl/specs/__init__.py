"""Tensor specs: shapes, dtypes, devices and domains of the data tdrl moves around.

Leading dims of a spec's ``shape`` are batch dims. Leaves (:class:`Unbounded`,
:class:`Bounded`, :class:`Categorical`, :class:`OneHot`, :class:`MultiCategorical`,
:class:`MultiOneHot`, :class:`Binary`, :class:`NonTensor`) describe tensors; :class:`Composite`
describes a (nested) TensorDict; :class:`StackedComposite` describes a lazy stack of
heterogeneous TensorDicts (multi-agent).

Examples:
    >>> import torch
    >>> from tdrl.specs import Bounded, Composite
    >>> spec = Composite(action=Bounded(-1.0, 1.0, shape=(2, 3)), shape=(2,))
    >>> td = spec.rand()
    >>> td["action"].shape, spec.is_in(td)
    (torch.Size([2, 3]), True)
"""

from tdrl.specs._base import TensorSpec
from tdrl.specs._choice import Choice
from tdrl.specs._composite import Composite
from tdrl.specs._continuous import Bounded, Unbounded
from tdrl.specs._discrete import Binary, Categorical, OneHot
from tdrl.specs._make import make_composite_from_td
from tdrl.specs._multi_discrete import MultiCategorical, MultiOneHot
from tdrl.specs._non_tensor import NonTensor
from tdrl.specs._space import BoxList, CategoricalBox, ContinuousBox
from tdrl.specs._stacked import StackedComposite, stack_specs
from tdrl.specs._stacked_leaves import Stacked

__all__ = [
    "Binary",
    "Bounded",
    "BoxList",
    "Categorical",
    "CategoricalBox",
    "Choice",
    "Composite",
    "ContinuousBox",
    "MultiCategorical",
    "MultiOneHot",
    "NonTensor",
    "OneHot",
    "Stacked",
    "StackedComposite",
    "TensorSpec",
    "Unbounded",
    "make_composite_from_td",
    "stack_specs",
]
