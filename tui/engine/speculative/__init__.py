"""Speculative decoding: the drafters and the verify round."""
