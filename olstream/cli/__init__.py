"""The `olstream` command, on top of every other floor."""
