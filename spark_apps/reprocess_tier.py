"""
``spark-submit`` entry point: reprocess one retry tier of a Kafka topology.

    spark-submit --py-files deps.zip spark_apps/reprocess_tier.py --topology FILE --tier SPEC \
        --options-json JSON --kafka-config-file PATH --result PATH|URL [--cutoff-ms MS]

See :mod:`airflow_kafka_retry.spark.app` for the arguments; ``airflow-kafka-retry drain --engine spark``
and ``SparkReprocessTierOperator`` build the command (and the py-files zip) for you.
"""

from __future__ import annotations

import sys

from airflow_kafka_retry.spark.app import main

if __name__ == "__main__":
    sys.exit(main())
