"""Performance bench of airflow-kafka-retry: ``python -m bench`` (see ``bench/__main__.py``)."""
