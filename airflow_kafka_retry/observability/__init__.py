"""Metrics (through Airflow's ``Stats``) and OpenLineage facets of tier runs, replays and the DLT watch."""
