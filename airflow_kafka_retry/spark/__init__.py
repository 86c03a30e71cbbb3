"""Reprocessing a tier with Apache Spark: one Spark task per Kafka partition.

* :mod:`~airflow_kafka_retry.spark.app` -- the PySpark application (driver and executor side).
* :mod:`~airflow_kafka_retry.spark.submit` -- everything a ``spark-submit`` needs (py-files,
  arguments, the credentials file) and :func:`~airflow_kafka_retry.spark.submit.run_spark_submit`.

Nothing here imports Airflow; the operator lives in :mod:`airflow_kafka_retry.operators`.
"""
