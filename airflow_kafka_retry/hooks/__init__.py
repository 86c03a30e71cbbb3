"""Airflow hooks of the Kafka retry provider."""
