"""What crosses the network: requests, faults, replies read as untrusted data."""
