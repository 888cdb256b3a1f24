"""Types of the compiled warm path of einsum (built from gpu_tc/_warm.c)."""

from typing import Any

class WarmEinsum:
    def __init__(self, fallback: Any, array_type: type, level: Any) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
