"""
``spark-submit`` entry point shipped inside the package (the operator's default application).

An installed provider finds it at ``airflow_kafka_retry/spark/entrypoint.py`` without the repository
checkout; ``spark_apps/reprocess_tier.py`` is the same entry point for use from a checkout.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # pragma: no cover - run by spark-submit
    # spark-submit puts this file's folder first on sys.path; its modules (app, result, submit)
    # must not shadow top-level modules of the same name in user code.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

    from airflow_kafka_retry.spark.app import main

    sys.exit(main())
