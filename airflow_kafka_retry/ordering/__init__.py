"""Operating key-ordered retries (``ordering: key``): ``ordering release`` releases a key by hand."""
