"""The version of what a run releases for a given configuration, input and seed.

A seed may be used again only on the same run (the job's seed registry): the same configuration, the
same input, the same code, hence the same releases. If a new version of dpstream released something else
for the same configuration, input and seed, the two runs would share their noise, and their difference
would be an exact function of the data. So every change that alters the releases of an unchanged
configuration bumps :data:`ALGORITHM_VERSION`, which is part of the run's identity in the registry: a
seed recorded by an earlier version is then refused. ``tests/test_algorithm_version.py`` holds the digest
of a default run's releases for the current version and fails when they change without a bump.
"""

ALGORITHM_VERSION = 10
