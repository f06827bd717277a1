"""kfed deploy."""
