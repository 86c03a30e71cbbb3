"""Reads of whole topics that answer a question: backlog, dead-letter counts, the DLT scan, peer consumers."""
