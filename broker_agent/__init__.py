"""kfed broker_agent."""
