"""
Launchers and set-ups that only the tests (``tests/``) and the benches (``bench/``) use; not shipped.

They build on the package's own launchers (``airflow_kafka_retry.sandbox``: one process lifecycle, Apache
Kafka, the local Airflow deployment): Kafka Connect, Redis, Celery workers, a Spark standalone cluster, broker
capability probes, share-group brokers and set-ups. Importable from the checkout's root (pytest and
``python -m bench`` put it on ``sys.path``). The package never imports this folder; ``tests/`` never imports
``bench/``: what both need lives here.
"""
