"""The model, its file, its vocabulary and its context (llama.cpp only)."""
