"""Scheduled redrive policies (``redrive:`` in a topology): the policies, a round's rules (pure)."""
