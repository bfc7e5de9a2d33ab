"""The run's records: decodes, picks, turns, surprise, attention weights kept."""
