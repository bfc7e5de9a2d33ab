"""A server as a backend: llama-server and OpenAI-compatible servers."""
