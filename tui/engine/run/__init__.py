"""The loop that drives llama_decode, and the Engine that assembles it."""
