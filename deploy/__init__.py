"""Running kfed: the embedded local federation (``local_up``, ``kfed local up``), the launchers it and the tests
share (``launcher``), the Apache Kafka, Tansu and Spark processes, the jars from Maven Central, and the systemd
and Kubernetes files.

Its errors (``metadata_log.errors``' tree):

    InvalidSetting
    └── JarsNotInstalled           the broker's jars                (also RuntimeError)
    KfedError
    └── ProcessExited, SparkClusterError  a local process did not start (also RuntimeError)
"""
