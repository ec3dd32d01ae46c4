"""Joins across layers: pods, nodes, Ray nodes, GPUs, vLLM servers and Prometheus series, model in, model out."""
