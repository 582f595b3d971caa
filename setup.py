from setuptools import find_packages, setup

setup(
    name="dpstream",
    version="0.1.0",
    description="Differentially private streaming k-means / k-median (Epasto, Mukherjee, Zhong) on Apache Beam",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["dpstream", "dpstream.*", "transforms", "transforms.*", "pipelines",
                                    "pipelines.*"]),
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "dp-accounting>=0.4",
        "matplotlib>=3.7",
        # Beam without its Google Cloud extra: a local run never uses the Dataflow, BigQuery, Cloud Storage …
        # clients that `import apache_beam` loads whenever they are installed (~0.3 s of every job's start)
        "apache-beam>=2.77,<2.78",  # pipelines/local_runner patches private code measured on 2.77
        "google-cloud-pubsub>=2.1,<3",  # the Pub/Sub input and output, the local emulator, consume_releases
    ],
    extras_require={
        # Dataflow submission and gs:// paths (the Flex Template's image installs it): Beam's Google Cloud extra
        "gcp": ["apache-beam[gcp]>=2.77,<2.78"],
        # drongo: the in-process Pub/Sub fallback where Google's emulator package is absent
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "drongo==0.8.0"],
        # diffprivlib 0.6.6 does not import with scikit-learn >= 1.9: benchmark-only, own venv
        "bench": ["diffprivlib==0.6.6", "scikit-learn>=1.3,<1.9", "pillow"],
    },
    entry_points={"console_scripts": ["dpstream=pipelines.dp_stream_cluster:command"]},
)
