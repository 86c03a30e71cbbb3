"""Kafka itself: clients, messages, topic admin, the read-to-the-end scan, call deadlines."""
