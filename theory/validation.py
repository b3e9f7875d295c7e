"""One-line configuration errors shared by every layer (ARCHITECTURE §3: bad input fails before any
compile with one line naming the field and the allowed range)."""

from __future__ import annotations


class ConfigError(Exception):
    """A user-facing configuration error: ``field = value: what is allowed``."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field} = {value!r}: {allowed}")


def require(condition: bool, field: str, value: object, allowed: str) -> None:
    """Raise ``ConfigError(field, value, allowed)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(field, value, allowed)
