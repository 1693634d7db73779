"""Operating a running pipeline: error records, replays, one run explained."""
