"""Runnable dpstream jobs: ``python -m pipelines.dp_stream_cluster`` (the ``dpstream`` command)."""
