"""The error types of the policy package: an invalid topology, an invalid replay or inspect request."""

from __future__ import annotations

from collections.abc import Sequence


class TopologyError(ValueError):
    """
    A topology is invalid. The message names the source (file), the field and what is wrong.

    One error may carry several problems (:meth:`combine`): validation reports every problem of a
    file at once, each in :attr:`errors` with its own field.

    :param problem: what is wrong and, where useful, what would be right.
    :param field: dotted path of the offending key, e.g. ``backoff.initial``.
    :param source: where the topology came from: a file path, or ``<python>`` for a mapping.
    """

    def __init__(self, problem: str, *, field: str | None = None, source: str | None = None) -> None:
        self.problem = problem
        self.field = field
        self.source = source
        self.errors: tuple[TopologyError, ...] = (self,)
        where = ": ".join(p for p in (source, f"field '{field}'" if field else None) if p)
        super().__init__(f"{where}: {problem}" if where else problem)

    def located(self, *, source: str | None = None, field_prefix: str | None = None) -> TopologyError:
        """Return the same error(s) with the source and/or a parent field path filled in."""
        if len(self.errors) > 1:
            return TopologyError.combine(
                [e.located(source=source, field_prefix=field_prefix) for e in self.errors]
            )
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return TopologyError(self.problem, field=field, source=source or self.source)

    @classmethod
    def combine(cls, errors: Sequence[TopologyError]) -> TopologyError:
        """
        One error for several problems (the problem itself when there is only one).

        The message lists every problem on its own line, each naming file and field.
        """
        flat = [e for error in errors for e in error.errors]
        if not flat:
            raise ValueError("no errors to combine")
        if len(flat) == 1:
            return flat[0]
        sources = {e.source for e in flat}
        source = flat[0].source if len(sources) == 1 else None
        lines = "\n".join(f"  - {e}" for e in flat)
        combined = cls(f"{len(flat)} problems:\n{lines}")
        combined.source = source
        combined.errors = tuple(flat)
        return combined


class ReplayError(ValueError):
    """
    Bad input for a DLT replay or inspect (filter, topic, transform, target); nothing was moved.

    The message names what is wrong: the option, the topic, or the record's coordinates.
    """
