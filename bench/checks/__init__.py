"""
The bench's own self-check: the pure logic of its results files and its report, tested without a broker.

``scripts/test`` runs it with the suite (``setup.cfg``'s ``testpaths``); ``tests/`` never imports ``bench/``.
"""
