"""
Reprocess the ``orders-retry-1`` tier with Spark every 30 seconds (the tier's delay).

Copy next to your DAGs; set the ``kafka_default`` connection (extra = librdkafka config, may hold
credentials) and ``spark_default`` (any master), and put ``dags/topologies/orders.yaml`` and the
handler package where the Airflow worker can read them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator
from airflow_kafka_retry.policy.topology.file import load_topology

TOPOLOGY = Path(__file__).parent / "topologies" / "orders.yaml"
TIER = 1
delay = timedelta(milliseconds=load_topology(TOPOLOGY).tier(TIER).delay_ms)

with DAG(
    dag_id="orders_retry_1_spark",
    schedule=delay,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one run per tier at a time: runs of the same partitions would fence each other
    tags=["kafka-retry"],
) as dag:
    SparkReprocessTierOperator(
        task_id="reprocess_orders_retry_1",
        topology=str(TOPOLOGY),
        tier=TIER,
        handler="handlers.orders:handle",
        value_deserializer="handlers.orders:decode",
        kafka_conn_id="kafka_default",
        conn_id="spark_default",
        options={"batch_size": 100, "chunk_size": 1000},
        # every task carries the Kafka configuration to its executor: on a cluster, credentials in it are
        # only sent over authenticated, encrypted Spark RPC (a standalone master also needs
        # spark.authenticate.secret, given in a 0600 properties_file= rather than conf, which ps shows;
        # YARN, Kubernetes and local masters generate one per application)
        conf={"spark.authenticate": "true", "spark.network.crypto.enabled": "true"},
    )
