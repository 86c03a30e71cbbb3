"""Airflow triggers of the Kafka retry provider (serializable; they take connection ids, never configurations)."""
