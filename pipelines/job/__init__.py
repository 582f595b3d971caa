"""The Beam job behind ``python -m pipelines.dp_stream_cluster`` (the ``dpstream`` command), one module a
concern: ``options`` (the parser), ``arguments`` (options → a frozen ``Job``), ``description`` (the ``Job``),
``graph`` (the labelled steps), ``preflight`` (output places), ``launch`` (seed, runner, run) and ``cli``
(exit codes, one-line errors, the summary). Nothing here imports Beam at module level: ``--help`` stays fast.
"""
