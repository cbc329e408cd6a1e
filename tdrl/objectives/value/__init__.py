"""tdrl.objectives.value."""

__all__: list[str] = []
