"""Choice: a spec whose values come from one of several specs or fixed non-tensor values."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, is_non_tensor

from tdrl.errors import SpecError
from tdrl.specs._base import TensorSpec
from tdrl.specs._utils import DeviceLike, ShapeLike

__all__ = ["Choice"]

Option = TensorSpec | NonTensorData | NonTensorStack


def _check_choices(choices: Any) -> None:
    if not isinstance(choices, list) or not choices:
        raise TypeError(
            f"Choice.__init__: choices must be a non-empty list (got {type(choices).__name__};"
            " expected a list of specs or of NonTensorData/NonTensorStack). Pass a list."
        )
    first = choices[0]
    if not isinstance(first, (TensorSpec, NonTensorData, NonTensorStack)):
        raise TypeError(
            f"Choice.__init__: a choice is neither a spec nor non-tensor data (got"
            f" {type(first).__name__}; expected a TensorSpec, NonTensorData or NonTensorStack)."
            " Wrap values in NonTensorData or use specs."
        )
    for c in choices[1:]:
        if not isinstance(c, type(first)):
            raise TypeError(
                f"Choice.__init__: choices have different types (got {type(c).__name__} and"
                f" {type(first).__name__}; expected one type). Use one kind of choice."
            )
        for attr in ("shape", "dtype", "device"):
            if getattr(c, attr) != getattr(first, attr):
                raise ValueError(
                    f"Choice.__init__: choices have different {attr}s (got {getattr(c, attr)}"
                    f" and {getattr(first, attr)}; expected one {attr}). Make them agree."
                )


class Choice(TensorSpec):
    """Values drawn from one of several specs (or fixed non-tensor values), picked uniformly.

    ``rand`` first picks one choice uniformly (one pick per call, with torch's RNG), then
    samples it; a non-tensor choice is returned as is. ``zero`` uses the first choice and
    ``one`` the second (the first if there is only one). A value is in the spec when it is in
    any choice (equal to it, for non-tensor choices).

    Args:
        choices: specs, or ``NonTensorData``/``NonTensorStack`` values, of one type, shape,
            dtype and device (copied).

    Raises:
        TypeError: ``choices`` is not a non-empty list of one type of spec or data.
        ValueError: the choices differ in shape, dtype or device.

    Examples:
        >>> from tdrl.specs import Bounded
        >>> spec = Choice([Bounded(0.0, 1.0, shape=(1,)), Bounded(10.0, 11.0, shape=(1,))])
        >>> v = spec.rand()
        >>> bool(v < 1) or bool(v >= 10), spec.is_in(torch.tensor([5.0]))
        (True, False)
        >>> from tensordict import NonTensorData
        >>> Choice([NonTensorData(s) for s in "abc"]).rand().data in "abc"
        True
    """

    def __init__(self, choices: list[Option]) -> None:
        _check_choices(choices)
        first = choices[0]
        super().__init__(first.shape, first.device, first.dtype)
        self.choices: list[Option] = [c.clone() for c in choices]

    @property
    def num_choices(self) -> int:
        """Number of choices."""
        return len(self.choices)

    def _pick(self, idx: int, method: str, shape: ShapeLike | None) -> Any:
        choice = self.choices[idx]
        if isinstance(choice, TensorSpec):
            return getattr(choice, method)(shape)
        return choice.clone()

    def rand(self, shape: ShapeLike | None = None) -> Any:
        """A sample of one choice picked uniformly.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> Choice([Categorical(2), Categorical(2)]).rand((3,)).shape
            torch.Size([3])
        """
        idx = int(torch.randint(0, len(self.choices), ()).item())
        return self._pick(idx, "rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> Any:
        """The zero of the first choice."""
        return self._pick(0, "zero", shape)

    def one(self, shape: ShapeLike | None = None) -> Any:
        """The one of the second choice (the first if there is only one)."""
        return self._pick(min(1, len(self.choices) - 1), "one", shape)

    def _matches(self, choice: Option, val: Any) -> bool:
        if isinstance(choice, TensorSpec):
            return bool(choice.is_in(val))
        return bool(is_non_tensor(val)) and val.tolist() == choice.tolist()

    def is_in(self, val: Any) -> bool:
        """Whether ``val`` is in any choice.

        Examples:
            >>> from tensordict import NonTensorData
            >>> spec = Choice([NonTensorData("a"), NonTensorData("b")])
            >>> spec.is_in(NonTensorData("b")), spec.is_in(NonTensorData("z"))
            (True, False)
        """
        return any(self._matches(c, val) for c in self.choices)

    def assert_is_in(self, value: Any, key: Any = None) -> None:
        """Raises a :class:`~tdrl.errors.SpecError` when ``value`` is in no choice."""
        if not self.is_in(value):
            where = "" if key is None else f" for key {key!r}"
            raise SpecError(
                f"Choice.assert_is_in: value{where} is in none of the {len(self.choices)}"
                f" choices (got {value!r}; expected a value of one of {self.choices})."
                " Use a value of one of the choices."
            )

    def project(self, val: Any) -> Any:
        """Not defined (which choice to project on is ambiguous); TorchRL neither has it."""
        raise NotImplementedError(
            "Choice.project: projecting on a choice is not supported (got a value for"
            f" {len(self.choices)} choices; expected none). Project with spec.choices[i]."
        )

    def cardinality(self) -> int:
        """Number of distinct values: the number of data choices, or the sum over the specs.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> Choice([Categorical(2), Categorical(2)]).cardinality()
            4
        """
        if not isinstance(self.choices[0], TensorSpec):
            return len(self.choices)
        total = 0
        for c in self.choices:
            count = getattr(c, "cardinality", None)
            if count is None:
                raise TypeError(
                    f"Choice.cardinality: a choice has no finite number of values (got"
                    f" {type(c).__name__}; expected discrete specs). Use discrete choices."
                )
            total += int(count())
        return total

    def _each(self, fn: Any) -> Choice:
        return Choice([fn(c) for c in self.choices])

    def expand(self, *shape: Any) -> Choice:
        """Every choice expanded."""
        return self._each(lambda c: c.expand(*shape))

    def squeeze(self, dim: int | None = None) -> Choice:
        """Every choice squeezed."""
        return self._each(lambda c: c.squeeze() if dim is None else c.squeeze(dim))

    def unsqueeze(self, dim: int) -> Choice:
        """Every choice unsqueezed."""
        return self._each(lambda c: c.unsqueeze(dim))

    def __getitem__(self, idx: Any) -> Choice:
        """Every choice indexed on its batch dims."""
        return self._each(lambda c: c[idx])

    def to(self, dest: DeviceLike | torch.dtype) -> Choice:
        """Every choice moved or cast."""
        return self._each(lambda c: c.to(dest))

    def clone(self) -> Choice:
        """A deep copy."""
        return self._each(lambda c: c.clone())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Choice) or len(other.choices) != len(self.choices):
            return False
        for a, b in zip(self.choices, other.choices):
            same = a == b if isinstance(a, TensorSpec) else self._matches(a, b)
            if not same:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Choice({self.choices!r})"
