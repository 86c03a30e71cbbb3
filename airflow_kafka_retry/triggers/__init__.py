"""
Airflow triggers of the Kafka retry provider.

Serializable: they take connection ids, never configurations.
"""
