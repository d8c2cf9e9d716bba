"""The API server's validation rules for the kinds the extender uses: DRA's limits and name formats."""

from extender.model.validation.rules import validate

__all__ = ["validate"]
