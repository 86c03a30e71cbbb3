"""Key-ordered retries (``ordering: key``): the order book's entries, its marks and its rules (pure)."""
