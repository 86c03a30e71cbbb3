"""The local engine: every partition of a tier on this machine, in threads or worker processes."""
