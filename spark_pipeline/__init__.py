"""kfed spark_pipeline."""
