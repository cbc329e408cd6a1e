"""tdrl.data."""

__all__: list[str] = []
