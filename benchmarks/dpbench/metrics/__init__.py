"""Metrics: cost (k-means and k-median), checkpoints (prefix releases), state (floats), throughput."""
