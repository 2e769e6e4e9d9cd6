"""The dashboard: a web view of the queues, and their gauges for Prometheus (``metrics.py``)."""
