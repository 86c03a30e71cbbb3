"""
DLT operations: inspect a dead-letter (or parking) topic, replay records from it, exactly once.

One concept per module: ``records`` (a DLT record and what its headers say), ``groups`` (grouping
for inspect), ``filters`` (which records a replay selects), ``transform`` (loading and validating
the user's edit function), ``topics`` (the source DLT and the replay target), ``replay`` (plan,
dry run and transactional moves) and ``summary`` (what a replay reports). Parking itself is policy
(:mod:`airflow_kafka_retry.policy.routing.resolver`); the audit headers are in
:mod:`airflow_kafka_retry.policy.headers.replay`. Reading a topic without committing
(:mod:`airflow_kafka_retry.engine.kafka.reading`) and the compacted bookkeeping topic
(:mod:`airflow_kafka_retry.engine.logs.replay_log`) are in the engine, which checks replayed records
against that log too. Used by the CLI, the operator and the DAG.
"""
