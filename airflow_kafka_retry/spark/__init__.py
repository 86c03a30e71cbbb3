"""
Reprocessing a tier with Apache Spark: one Spark task per Kafka partition.

* :mod:`~airflow_kafka_retry.spark.app` -- the PySpark application (driver and executor side).
* :mod:`~airflow_kafka_retry.spark.submit` -- everything a ``spark-submit`` needs (py-files,
  arguments, the credentials file) and :func:`~airflow_kafka_retry.spark.submit.run_spark_submit`.
* :mod:`~airflow_kafka_retry.spark.credentials` -- the ``0600`` Kafka configuration file.
* :mod:`~airflow_kafka_retry.spark.transport` -- refusing Kafka secrets over unprotected Spark RPC.
* :mod:`~airflow_kafka_retry.spark.staging` -- the credentials file in cluster deploy mode.
* :mod:`~airflow_kafka_retry.spark.masking` -- masking the logged ``spark-submit`` command line.
* :mod:`~airflow_kafka_retry.spark.result` -- the run summary the driver leaves, private and read once.

Nothing here imports Airflow; the operator lives in :mod:`airflow_kafka_retry.operators`.
"""
