"""The worker's faust runtime: the app, the agent, the consumer adapter and the sender."""
