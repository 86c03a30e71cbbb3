"""
The launchers the package itself runs: ``airflow-kafka-retry broker`` and ``airflow-kafka-retry demo``.

One process lifecycle for all of them (``processes``: start, wait for ready, stop, killed with the parent):
the embedded Tansu broker and the broker command (``broker``), a real Apache Kafka from its pinned Maven jars
(``kafka``, ``kafka_node``, ``kafka_jars`` with its ``pom.xml``; ``kafka_cluster`` and ``kafka_roles`` for
``broker --kafka --nodes N``; ``kafka_secure`` for ``broker --kafka --secure``), scratch topics
(``scratch_topics``), and the demo's local Airflow deployment (``airflow_stack``, ``postgres``,
``loopback_server``, ``warm_cli``).

Only what the wheel needs lives here. The launchers that only the tests and the benches use (Kafka Connect,
Redis, Celery workers, a Spark standalone cluster, broker capability probes, share-group set-ups) live in the
checkout's top-level ``testkit/``, which is not shipped; nothing in the package imports it.
"""
