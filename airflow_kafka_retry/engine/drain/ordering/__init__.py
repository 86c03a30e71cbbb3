"""Key-ordered retries (``ordering: key``, ``docs/ordering.md``): the keeper lane and the marking lane."""
