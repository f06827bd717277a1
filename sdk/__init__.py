"""kfed sdk."""
