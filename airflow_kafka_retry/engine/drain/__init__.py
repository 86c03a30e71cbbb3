"""Draining one partition of a tier: the job, its chunks, the handler, failure routing, the transaction."""
