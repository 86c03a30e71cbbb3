"""The DAG factory: assembles the operators, sensors and notifiers into scheduled retry-tier DAGs."""
