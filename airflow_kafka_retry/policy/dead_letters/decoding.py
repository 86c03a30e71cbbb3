"""
Decoding one dead-letter header value, the way the framework that wrote it encodes it, never raising.

Each reader takes the record's headers and a header name and returns the value, or None when the header
is absent. A header that is present but cannot be read -- a binary number of the wrong size, decimal text
that is not a number or out of Java's range, text that is not UTF-8, a null value -- is recorded in
:attr:`HeaderReader.unreadable` by name with the reason, and also reads as None. The encodings:

* Spring (``DeadLetterPublishingRecoverer.maybeAddOriginalHeaders``): ``ByteBuffer.putInt`` / ``putLong``,
  4- and 8-byte big-endian; ``retry_topic-original-timestamp`` is ``BigInteger.toByteArray`` (1 to 8
  bytes of two's complement for a time in epoch ms); ``retry_topic-attempts`` 4 bytes (1 byte in old
  Spring versions).
* Kafka Connect (``DeadLetterQueueReporter``) and the share-group DLQ (``ShareGroupDLQStateManager``):
  ``String.valueOf(int)`` / ``Long.toString`` / ``Short.toString`` as UTF-8 decimal text.
* Text everywhere: ``String.getBytes(UTF_8)``.

The last header of a name counts (Kafka's ``Headers.lastHeader``). Pure: no I/O, no Airflow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

Header = tuple[str, bytes | None]

#: Java's ranges, for decimal text and for the widths of Spring's binary numbers.
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
INT16 = (-(2**15), 2**15 - 1)
_DECIMAL = re.compile(rb"-?[0-9]{1,20}")


@dataclass
class HeaderReader:
    """The headers of one record, read field by field; what could not be read is kept by name."""

    headers: Sequence[Header]
    unreadable: dict[str, str] = field(default_factory=dict)

    def raw(self, name: str) -> tuple[bool, bytes | None]:
        """``(present, value)`` of the last header called ``name``."""
        found, value = False, None
        for key, val in self.headers:
            if key == name:
                found, value = True, val
        return found, value

    def _value(self, name: str) -> bytes | None:
        present, value = self.raw(name)
        if present and value is None:
            self.unreadable[name] = "null value"
        return value

    def text(self, name: str) -> str | None:
        """UTF-8 text."""
        value = self._value(name)
        if value is None:
            return None
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.unreadable[name] = f"not UTF-8 (byte {exc.start})"
            return None

    def fixed(self, name: str, size: int) -> int | None:
        """A ``size``-byte big-endian signed number (``ByteBuffer.putInt``: 4, ``putLong``: 8)."""
        value = self._value(name)
        if value is None:
            return None
        if len(value) != size:
            self.unreadable[name] = f"{len(value)} byte(s), expected {size} (big-endian)"
            return None
        return int.from_bytes(value, "big", signed=True)

    def big_integer(self, name: str) -> int | None:
        """``BigInteger.toByteArray`` of a long: 1 to 8 bytes of two's complement."""
        value = self._value(name)
        if value is None:
            return None
        if not 1 <= len(value) <= 8:
            self.unreadable[name] = f"{len(value)} byte(s), expected 1 to 8 (BigInteger of a long)"
            return None
        return int.from_bytes(value, "big", signed=True)

    def decimal(self, name: str, bounds: tuple[int, int]) -> int | None:
        """Decimal text of a Java ``int``/``long``/``short`` (``String.valueOf``), within ``bounds``."""
        value = self._value(name)
        if value is None:
            return None
        if not _DECIMAL.fullmatch(value):
            shown = value[:20].decode("utf-8", errors="replace")
            self.unreadable[name] = f"not decimal text ({shown!r})"
            return None
        number = int(value)
        if not bounds[0] <= number <= bounds[1]:
            self.unreadable[name] = f"{number} is out of range {bounds[0]}..{bounds[1]}"
            return None
        return number

    def attempts(self, name: str) -> int | None:
        """Spring's ``retry_topic-attempts``: 4 bytes, or 1 byte (unsigned) as older versions wrote it."""
        value = self._value(name)
        if value is None:
            return None
        if len(value) == 1:
            return value[0]
        if len(value) == 4:
            return int.from_bytes(value, "big", signed=True)
        self.unreadable[name] = f"{len(value)} byte(s), expected 4 (or 1 in older Spring versions)"
        return None
