"""DAG factories: assemble the provider's operators and sensors into DAGs, nothing more."""
