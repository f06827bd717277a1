import sys

from bench import cli, spark

# Issue 6: the kfed Spark source vs plain confluent-kafka (pyspark is imported only when it runs).
SPARK = cli.Benchmark("spark", "#6", "kfed Spark source vs plain confluent-kafka, same partitions", spark.run)
cli.BENCHMARKS = (*cli.BENCHMARKS, SPARK)
cli.BY_NAME[SPARK.name] = SPARK

sys.exit(cli.main())
