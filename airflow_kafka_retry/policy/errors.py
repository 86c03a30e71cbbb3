"""The one error type of the policy package."""

from __future__ import annotations


class TopologyError(ValueError):
    """A topology is invalid. The message names the source (file), the field and what is wrong.

    :param problem: what is wrong and, where useful, what would be right.
    :param field: dotted path of the offending key, e.g. ``backoff.initial``.
    :param source: where the topology came from: a file path, or ``<python>`` for a mapping.
    """

    def __init__(self, problem: str, *, field: str | None = None, source: str | None = None) -> None:
        self.problem = problem
        self.field = field
        self.source = source
        where = ": ".join(p for p in (source, f"field '{field}'" if field else None) if p)
        super().__init__(f"{where}: {problem}" if where else problem)

    def located(self, *, source: str | None = None, field_prefix: str | None = None) -> TopologyError:
        """Return the same error with the source and/or a parent field path filled in."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return TopologyError(self.problem, field=field, source=source or self.source)
