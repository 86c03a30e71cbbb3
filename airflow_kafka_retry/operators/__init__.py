"""Airflow operators of the Kafka retry provider."""
