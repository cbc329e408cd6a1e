"""tdrl.modules."""

__all__: list[str] = []
