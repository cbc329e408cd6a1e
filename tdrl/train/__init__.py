"""tdrl.train."""

__all__: list[str] = []
