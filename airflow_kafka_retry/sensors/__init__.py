"""Airflow sensors of the Kafka retry provider."""
