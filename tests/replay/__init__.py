"""A Kubernetes API replay server for testing live collection without a cluster (see server.py)."""
