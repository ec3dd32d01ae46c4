"""The model of what every layer knows (one Snapshot), and the clock that ages it."""
